"""Prebuilt chat JSONL datasets: parsing, validation and prompt normalization.

Standard library and tt_stagekit only, shared by the host-side plugin (spec validation) and
the engine runtime, so both refuse exactly the same rows with the same
file:line messages. The system message a row may carry is the host's compiled one (given,
never rebuilt here); prompts are compared with tt_stagekit.chatrows.normalize_prompt, the
host compiler's own rule.

A row is `{"messages": [system?, user, assistant, ...]}` (a chat of user,
assistant, tool and further system turns that ends with an assistant answer)
or `{"prompt": ..., "completion": ...}` (strings, or lists of messages as in
TRL's conversational prompt-completion format), or a ShareGPT or alpaca row (mapped by
tt_stagekit.rowformats), with an optional string `id`.
A leading system message must equal the compiled one (the compiled message
leads every row anyway). Other keys are ignored: the readers count them so the
caller warns once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Optional

from tt_stagekit.chatrows import (check_row, check_turns, example_keys, normalize_prompt, normalize_row,
                                 overlapping_example, parsed_lines, read_lines)

SPLITS = ("train", "validation", "test")


class RowError(ValueError):
    """A bad dataset row; the message starts with `file:line:`."""


ROLES = ("system", "user", "assistant", "tool")


def _check_row(value: Any, where: str, system_message: Optional[str],
               ignored: Optional[dict] = None) -> tuple[Optional[str], list[dict]]:
    row_id, messages = check_row(normalize_row(value, where, RowError, ignored), where, RowError, ROLES)
    roles = [m["role"] for m in messages]
    body = check_turns(messages, where, RowError)
    if roles[0] == "system" and system_message is not None and messages[0]["content"] != system_message:
        raise RowError(f"{where}: the system message differs from the spec's compiled system message")
    return row_id, body


def prompt_key(messages: list[dict]) -> str:
    """The normalized prompt of a row (every turn before its answer but system messages): duplicate/overlap key."""
    return normalize_prompt("\n".join(m["content"] for m in messages[:-1] if m["role"] != "system"))


def read_chat_jsonl(path: str | Path, split: str, system_message: Optional[str] = None,
                    ignored: Optional[dict] = None) -> list[dict]:
    """Read and check one prebuilt dataset; rows come back as `{"id", "messages": [user, ..., assistant], "line"}`.

    Keys a row has beyond the accepted ones are counted into `ignored` (key -> rows)."""
    path = Path(path)
    if path.is_symlink():
        raise RowError(f"{path}: symbolic links are refused")
    rows: list[dict] = []
    ids: set[str] = set()
    _, lines = read_lines(path, RowError)  # not UTF-8, a FIFO or a device: refused naming file (and line)
    for line_no, where, value in parsed_lines(lines, path, RowError):
        row_id, messages = _check_row(value, where, system_message, ignored)
        row_id = row_id or f"{split}-{line_no:06d}"
        if row_id in ids:
            raise RowError(f"{where}: duplicate id {row_id!r}")
        ids.add(row_id)
        rows.append({"id": row_id, "messages": messages, "line": line_no, "where": where})
    if not rows:
        raise RowError(f"{path}: no rows")
    return rows


def check_datasets(
    paths: dict[str, Path],
    system_message: Optional[str],
    example_inputs: Iterable[str] = (),
    ignored: Optional[dict] = None,
) -> dict[str, list[dict]]:
    """Load every set JSONL split and check them together (`check_overlaps`)."""
    loaded = {split: read_chat_jsonl(path, split, system_message, ignored) for split, path in paths.items()}
    check_overlaps(loaded, example_inputs)
    return loaded


def check_overlaps(loaded: dict[str, list[dict]], example_inputs: Iterable[str] = ()) -> None:
    """Refuse duplicate evaluation prompts and train/evaluation overlap; rows carry `where` (file:line, dataset:index).

    `example_inputs` are the spec's own examples: a prebuilt prompt equal to one
    of them, or a user turn of a multi-turn row equal to one (tt_stagekit.chatrows.overlapping_example),
    is an overlap too (the host holds some of them out).
    """
    examples = example_keys(example_inputs)
    for split in SPLITS:
        for row in loaded.get(split, []):
            found = overlapping_example(row["messages"], examples)
            if found and prompt_key(row["messages"]) not in examples:  # the whole prompt: the messages below
                raise RowError(f"{row['where']}: {found} (examples are split into train and held-out by the host, "
                               "so this row could put a held-out prompt into training); remove the row or the example")
    train_keys: dict[str, str] = {}
    for row in loaded.get("train", []):
        key = prompt_key(row["messages"])
        train_keys.setdefault(key, row["where"])
        if key in examples:
            raise RowError(
                f"{row['where']}: prompt overlaps examples[{examples[key]}].input "
                "(examples are split into train and held-out by the host)"
            )
    eval_keys: dict[str, str] = {}
    for split in ("validation", "test"):
        for row in loaded.get(split, []):
            where = row["where"]
            key = prompt_key(row["messages"])
            if key in eval_keys:
                raise RowError(f"{where}: duplicate evaluation prompt (first at {eval_keys[key]})")
            if key in train_keys:
                raise RowError(f"{where}: evaluation prompt overlaps training row {train_keys[key]}")
            if key in examples:
                raise RowError(f"{where}: evaluation prompt overlaps examples[{examples[key]}].input")
            eval_keys[key] = where
