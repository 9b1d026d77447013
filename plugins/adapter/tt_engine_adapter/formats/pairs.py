"""A preference-pairs JSONL file (`preference.pairs: FILE`): parsed and checked like every dataset.

Stdlib and tt_stagekit only, shared by the host-side spec (refused at `tt validate`, exit 2, `file:line`) and
the reference stage (which reads the same rows). A line is TRL's preference format:

    {"prompt": "text" | [messages ending with a user turn], "chosen": "text" | [one assistant message],
     "rejected": "text" | [one assistant message], "id"?: "..."}

Each side is checked as the chat row `prompt + [assistant answer]` by the dataset rules (formats.rows:
roles, turn order, a leading system message equal to the compiled one); chosen and rejected must differ.
A pair whose prompt (any user turn, or all of them together, normalized by tt_stagekit.sameness) equals one
of the spec's example inputs is refused: the host splits the examples into train and held-out, so that
pair could carry a held-out prompt into training.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable, Optional

from tt_stagekit.chatrows import example_keys, overlapping_example, parsed_lines, stream_lines
from tt_stagekit.sameness import normalize_prompt

from tt_engine_adapter.formats.rows import RowError, _check_row

PAIR_KEYS = ("id", "prompt", "chosen", "rejected")


def _answer(value: Any, where: str, key: str) -> str:
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], dict) \
            and value[0].get("role") == "assistant":
        value = value[0].get("content")
    if not isinstance(value, str) or not value.strip():
        raise RowError(f"{where}: {key!r} must be a non-empty string (or one assistant message)")
    return value


def _prompt(value: Any, where: str) -> list[dict]:
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if isinstance(value, list) and value and all(isinstance(m, dict) for m in value):
        return [dict(m) for m in value]
    raise RowError(f"{where}: 'prompt' must be a string or a list of messages ending with a user turn")


def _pairs_cap() -> int:
    """The largest pairs file read: the pairs are held in memory (several times the file's size), so a sixteenth
    of this machine's memory, at most 1 GiB."""
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        memory = 8 << 30
    return min(1 << 30, max(memory // 16, 16 << 20))


MAX_PAIRS_BYTES = _pairs_cap()


def read_pairs(path: str | Path, system_message: Optional[str] = None,
               example_inputs: Iterable[str] = ()) -> list[dict]:
    """The pairs as `{"id", "messages": [user, ...], "chosen", "rejected", "where"}`; RowError names file:line."""
    path = Path(path)
    if path.is_symlink():
        raise RowError(f"{path}: symbolic links are refused")
    examples = example_keys(example_inputs)
    pairs: list[dict] = []
    ids: set[str] = set()
    lines = stream_lines(path, RowError, MAX_PAIRS_BYTES)  # read once, line by line, under the cap
    for line_no, where, value in parsed_lines(lines, path, RowError):
        if not isinstance(value, dict):
            raise RowError(f"{where}: expected an object with prompt, chosen and rejected")
        unknown = sorted(k for k in value if k not in PAIR_KEYS)
        missing = [k for k in PAIR_KEYS[1:] if k not in value]
        if unknown or missing:
            raise RowError(f"{where}: " + (f"unknown key {unknown[0]!r}" if unknown else f"missing {missing[0]!r}")
                           + " (a pair is {prompt, chosen, rejected, id?})")
        row_id = value.get("id", f"pair-{line_no:06d}")
        if not isinstance(row_id, str) or not row_id:
            raise RowError(f"{where}: 'id' must be a non-empty string")
        if row_id in ids:
            raise RowError(f"{where}: duplicate id {row_id!r}")
        ids.add(row_id)
        prompt = _prompt(value["prompt"], where)
        chosen, rejected = _answer(value["chosen"], where, "chosen"), _answer(value["rejected"], where, "rejected")
        if normalize_prompt(chosen) == normalize_prompt(rejected):
            raise RowError(f"{where}: 'chosen' and 'rejected' are the same answer; a pair must prefer one of two")
        for answer in (chosen, rejected):
            _, messages = _check_row({"messages": prompt + [{"role": "assistant", "content": answer}]}, where,
                                     system_message)
        body = messages[:-1]
        found = overlapping_example(body, examples)
        if found:
            raise RowError(f"{where}: {found} (examples are split into train and held-out by the host, so this "
                           "pair could put a held-out prompt into training); remove the pair or the example")
        pairs.append({"id": row_id, "messages": body, "chosen": chosen, "rejected": rejected, "where": where})
    if not pairs:
        raise RowError(f"{path}: no pairs")
    return pairs
