"""Training and evaluation rows of a run: the prepare stage's files and their tokenization."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tt_engine_adapter.formats.rows import SPLITS, RowError, check_overlaps
from tt_engine_adapter.runtime import chat
from tt_engine_adapter.runtime.config import AdapterSpecFields
from tt_stagekit.protocol import InvalidInput, log


def read_jsonl(path: str | Path) -> list[dict]:
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def with_system(system_message: str, messages: list[dict]) -> list[dict]:
    """The chat led by the compiled system message (a leading system message is replaced, never duplicated;
    system turns later in a multi-turn chat are the data's own and stay)."""
    body = messages[1:] if messages and messages[0]["role"] == "system" else messages
    return [{"role": "system", "content": system_message}] + list(body)


def load_prebuilt(spec: AdapterSpecFields, system_message: str) -> dict[str, list[dict]]:
    """The spec's prebuilt datasets, re-checked against the run's compiled system message."""
    if spec.datasets is None:
        return {}
    from tt_engine_adapter.runtime import sources

    ignored: dict[str, int] = {}
    loaded: dict[str, list[dict]] = {}
    try:
        for split in SPLITS:
            for index, source in enumerate(spec.datasets.sources(split)):
                if source.hub:
                    got = sources.read_hub(source.hub, source.revision, source.split, split, system_message, ignored)
                else:
                    got = sources.read_local(source.path, split, system_message, ignored)
                loaded.setdefault(split, []).extend(sources.weighted(got, source.weight, seed=index))
        _unique_ids(loaded)
        check_overlaps(loaded, [e.input for e in spec.examples])
    except RowError as exc:
        raise InvalidInput(f"datasets: {exc}") from None
    if ignored:
        log("datasets: ignored keys " + ", ".join(f"{k!r} ({n} rows)" for k, n in sorted(ignored.items()))
            + "; a row is read from 'messages', 'prompt' + 'completion', ShareGPT 'conversations' or alpaca "
            "'instruction'/'input'/'output' (and an optional 'id')", "warning")
    return loaded


def _unique_ids(loaded: dict[str, list[dict]]) -> None:
    """Ids repeated across a split's sources (e.g. two files' generated `train-000001`) get a `~N` suffix."""
    for rows in loaded.values():
        seen: set[str] = set()
        for row in rows:
            base, n = row["id"], 1
            while row["id"] in seen:
                n += 1
                row["id"] = f"{base}~{n}"
            seen.add(row["id"])


def encode_rows(tokenizer: Any, rows: list[dict], max_seq_length: int, turns: str = "all") -> list[chat.Encoded]:
    """Tokenize training rows (loss on every assistant turn, or the last only: `turns`); a template that
    cannot render or a row without supervision is an input error."""
    try:
        eot = chat.end_of_turn_id(tokenizer)
        return [chat.encode_row(tokenizer, r["id"], r["messages"], max_seq_length, eot, turns) for r in rows]
    except chat.ChatError as exc:
        raise InvalidInput(str(exc)) from None
