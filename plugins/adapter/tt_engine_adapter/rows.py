"""Prebuilt chat JSONL datasets: parsing, validation and prompt normalization.

Standard library and tt_stagekit only, shared by the host-side plugin (spec validation) and
the engine runtime, so both refuse exactly the same rows with the same
file:line messages. The system message a row may carry is the host's compiled one (given,
never rebuilt here); prompts are compared with tt_stagekit.chatrows.normalize_prompt, the
host compiler's own rule.

A row is `{"messages": [system?, user, assistant]}` with an optional string
`id`; the optional system message must equal the compiled one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Optional

from tt_stagekit.chatrows import check_row, normalize_prompt, parsed_lines, read_lines

SPLITS = ("train", "validation", "test")


class RowError(ValueError):
    """A bad dataset row; the message starts with `file:line:`."""


def _check_row(value: Any, where: str, system_message: Optional[str]) -> tuple[Optional[str], list[dict]]:
    row_id, messages = check_row(value, where, RowError)
    roles = [m["role"] for m in messages]
    body = messages[1:] if roles[0] == "system" else messages
    if [m["role"] for m in body] != ["user", "assistant"]:
        raise RowError(
            f"{where}: a row must be an optional system message, one user message and one assistant answer "
            f"(got roles {roles})"
        )
    if roles[0] == "system" and system_message is not None and messages[0]["content"] != system_message:
        raise RowError(f"{where}: the system message differs from the spec's compiled system message")
    return row_id, body


def read_chat_jsonl(path: str | Path, split: str, system_message: Optional[str] = None) -> list[dict]:
    """Read and check one prebuilt dataset; rows come back as `{"id", "messages": [user, assistant]}`."""
    path = Path(path)
    if path.is_symlink():
        raise RowError(f"{path}: symbolic links are refused")
    rows: list[dict] = []
    ids: set[str] = set()
    _, lines = read_lines(path, RowError)  # not UTF-8, a FIFO or a device: refused naming file (and line)
    for line_no, where, value in parsed_lines(lines, path, RowError):
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
