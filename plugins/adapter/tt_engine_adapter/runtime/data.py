"""Training and evaluation rows of a run: the prepare stage's files and their tokenization."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tt_engine_adapter import rows as rowlib
from tt_engine_adapter.runtime import chat
from tt_engine_adapter.runtime.config import AdapterSpec
from tt_stagekit.protocol import InvalidInput


def read_jsonl(path: str | Path) -> list[dict]:
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def with_system(system_message: str, messages: list[dict]) -> list[dict]:
    """[system, user, assistant?] with the compiled system message (never duplicated)."""
    body = [m for m in messages if m["role"] != "system"]
    return [{"role": "system", "content": system_message}] + body


def load_prebuilt(spec: AdapterSpec, system_message: str) -> dict[str, list[dict]]:
    """The spec's prebuilt datasets, re-checked against the run's compiled system message."""
    paths = spec.datasets.paths() if spec.datasets else {}
    if not paths:
        return {}
    examples = [e.input for e in spec.examples]
    try:
        return rowlib.check_datasets(paths, system_message, examples)
    except rowlib.RowError as exc:
        raise InvalidInput(f"datasets: {exc}") from None


def encode_rows(tokenizer: Any, rows: list[dict], max_seq_length: int) -> list[chat.Encoded]:
    """Tokenize training rows; a template that cannot render or a row without supervision is an input error."""
    try:
        eot = chat.end_of_turn_id(tokenizer)
        chat.pad_token_id(tokenizer)
        return [chat.encode_row(tokenizer, r["id"], r["messages"], max_seq_length, eot) for r in rows]
    except chat.ChatError as exc:
        raise InvalidInput(str(exc)) from None
