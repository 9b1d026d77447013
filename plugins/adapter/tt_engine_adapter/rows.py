"""Prebuilt chat JSONL datasets: parsing, validation and prompt normalization.

Pure standard library, shared by the host-side plugin (spec validation) and
the engine runtime, so both refuse exactly the same rows with the same
file:line messages.

A row is `{"messages": [system?, user, assistant]}` with an optional string
`id`; the optional system message must equal the compiled one.
"""

from __future__ import annotations

import json
import re
import unicodedata
from pathlib import Path
from typing import Any, Iterable, Optional

DEFAULT_SYSTEM_MESSAGE = "Follow the demonstrated behavior."
SPLITS = ("train", "validation", "test")


class RowError(ValueError):
    """A bad dataset row; the message starts with `file:line:`."""


def normalize_prompt(text: str) -> str:
    """NFKC, trim, collapse whitespace, lower-case: the key for duplicate and overlap checks."""
    return re.sub(r"\s+", " ", unicodedata.normalize("NFKC", text)).strip().lower()


def compile_system_message(system_prompt: str, guidelines: Iterable[str], constraints: Iterable[str]) -> str:
    """The canonical system message of DESIGN.md §3 (the host's compiler is authoritative at run time)."""
    blocks = []
    if system_prompt.strip():
        blocks.append(system_prompt.strip())
    guidelines = [g.strip() for g in guidelines]
    constraints = [c.strip() for c in constraints]
    if guidelines:
        blocks.append("Guidelines:\n" + "\n".join(f"- {g}" for g in guidelines))
    if constraints:
        blocks.append("Constraints:\n" + "\n".join(f"- {c}" for c in constraints))
    return "\n\n".join(blocks) if blocks else DEFAULT_SYSTEM_MESSAGE


def _check_row(value: Any, where: str, system_message: Optional[str]) -> tuple[Optional[str], list[dict]]:
    if not isinstance(value, dict):
        raise RowError(f"{where}: a row must be a JSON object")
    unknown = sorted(set(value) - {"id", "messages"})
    if unknown:
        raise RowError(f"{where}: unknown key {unknown[0]!r} (a row has 'messages' and an optional 'id')")
    row_id = value.get("id")
    if row_id is not None and (not isinstance(row_id, str) or not row_id.strip()):
        raise RowError(f"{where}: 'id' must be a non-empty string")
    messages = value.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RowError(f"{where}: 'messages' must be a non-empty list")
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or set(message) != {"role", "content"}:
            raise RowError(f"{where}: messages[{index}] must be an object with exactly 'role' and 'content'")
        if message["role"] not in ("system", "user", "assistant"):
            raise RowError(f"{where}: messages[{index}].role must be system, user or assistant")
        if not isinstance(message["content"], str) or not message["content"].strip():
            raise RowError(f"{where}: messages[{index}].content must be a non-empty string")
    roles = [m["role"] for m in messages]
    body = messages[1:] if roles[0] == "system" else messages
    if [m["role"] for m in body] != ["user", "assistant"]:
        raise RowError(
            f"{where}: a row must be an optional system message, one user message and one assistant answer "
            f"(got roles {roles})"
        )
    if roles[0] == "system" and system_message is not None and messages[0]["content"] != system_message:
        raise RowError(f"{where}: the system message differs from the spec's compiled system message")
    return row_id, [dict(m) for m in body]


def read_chat_jsonl(path: str | Path, split: str, system_message: Optional[str] = None) -> list[dict]:
    """Read and check one prebuilt dataset; rows come back as `{"id", "messages": [user, assistant]}`."""
    path = Path(path)
    if path.is_symlink():
        raise RowError(f"{path}: symbolic links are refused")
    if not path.is_file():
        raise RowError(f"{path}: file not found")
    rows: list[dict] = []
    ids: set[str] = set()
    with path.open("r", encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, start=1):
            where = f"{path}:{line_no}"
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as exc:
                raise RowError(f"{where}: invalid JSON: {exc.msg}") from None
            row_id, messages = _check_row(value, where, system_message)
            row_id = row_id or f"{split}-{line_no:06d}"
            if row_id in ids:
                raise RowError(f"{where}: duplicate id {row_id!r}")
            ids.add(row_id)
            rows.append({"id": row_id, "messages": messages, "line": line_no})
    if not rows:
        raise RowError(f"{path}: no rows")
    return rows


def check_datasets(
    paths: dict[str, Path],
    system_message: Optional[str],
    example_inputs: Iterable[str] = (),
) -> dict[str, list[dict]]:
    """Load every set split; refuse duplicate evaluation prompts and train/evaluation overlap.

    `example_inputs` are the spec's own examples: a prebuilt prompt equal to one
    of them is an overlap too (the host holds some of them out).
    """
    loaded = {split: read_chat_jsonl(path, split, system_message) for split, path in paths.items()}
    examples = {normalize_prompt(text): index for index, text in enumerate(example_inputs)}
    train_keys: dict[str, str] = {}
    for row in loaded.get("train", []):
        key = normalize_prompt(row["messages"][0]["content"])
        train_keys.setdefault(key, f"{paths['train']}:{row['line']}")
        if key in examples:
            raise RowError(
                f"{paths['train']}:{row['line']}: prompt overlaps examples[{examples[key]}].input "
                "(examples are split into train and held-out by the host)"
            )
    eval_keys: dict[str, str] = {}
    for split in ("validation", "test"):
        for row in loaded.get(split, []):
            where = f"{paths[split]}:{row['line']}"
            key = normalize_prompt(row["messages"][0]["content"])
            if key in eval_keys:
                raise RowError(f"{where}: duplicate evaluation prompt (first at {eval_keys[key]})")
            if key in train_keys:
                raise RowError(f"{where}: evaluation prompt overlaps training row {train_keys[key]}")
            if key in examples:
                raise RowError(f"{where}: evaluation prompt overlaps examples[{examples[key]}].input")
            eval_keys[key] = where
    return loaded
