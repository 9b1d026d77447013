"""The general-regression set (`evaluation.general_regression.dataset`, policy in tt_host.spec.schema).

The dataset is chat JSONL, one row per line: `{"messages": [system?, user,
assistant, user, assistant, ...], "id"?}` ending with the reference answer.
It is checked at `tt validate` with file:line errors: invalid rows, duplicate
prompts (normalized as for examples), a system message that differs between
rows (or is present in some and absent in others), a `system_prompt`
that differs from the one embedded in the rows, and (`example_overlap`) a row
whose user turn equals one of the spec's examples. Stages receive prompts only
(`general_prompts`: ids and messages without the answer); the host keeps the
references and scores the answers (tt_host.evaluation.general_gate). Nothing here writes.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional

from tt_stagekit.chatrows import check_row, example_keys, normalize_prompt, overlapping_example, parsed_lines, read_lines


class GeneralSetError(ValueError):
    """A bad general-regression row; the message starts with `file:line:`."""


@dataclass(frozen=True)
class GeneralSet:
    path: Path
    sha256: str
    system_message: Optional[str]
    rows: list[dict[str, Any]]  # {"id", "messages" (full, system included when any), "line"}

    def prompts(self) -> list[dict[str, Any]]:
        """What a stage receives: every message but the reference answer."""
        return [{"id": r["id"], "messages": r["messages"][:-1]} for r in self.rows]

    def references(self) -> dict[str, str]:
        return {r["id"]: r["messages"][-1]["content"] for r in self.rows}


def _messages(value: Any, where: str) -> tuple[Optional[str], list[dict[str, str]]]:
    row_id, messages = check_row(value, where, GeneralSetError)
    body = messages[1:] if messages[0]["role"] == "system" else messages
    roles = [m["role"] for m in body]
    if len(roles) < 2 or len(roles) % 2 or roles != ["user", "assistant"] * (len(roles) // 2):
        raise GeneralSetError(f"{where}: expected an optional system message, then user/assistant turns ending with "
                              f"the reference answer (got roles {[m['role'] for m in messages]})")
    return row_id, messages


def read_general_set(path: Path, system_prompt: Optional[str]) -> GeneralSet:
    """Read and check the dataset; rows with no system message get `system_prompt` (when given)."""
    path = Path(path)
    data, lines = read_lines(path, GeneralSetError)  # a FIFO, device or folder is refused, never opened
    rows: list[dict[str, Any]] = []
    seen_prompts: dict[str, int] = {}
    ids: set[str] = set()
    system: Optional[tuple[Optional[str], int]] = None
    for line_no, where, value in parsed_lines(lines, path, GeneralSetError):
        row_id, messages = _messages(value, where)
        embedded = messages[0]["content"] if messages[0]["role"] == "system" else None
        if system is None:
            system = (embedded, line_no)
        elif embedded != system[0]:
            raise GeneralSetError(f"{where}: mixed system messages: this row's differs from line {system[1]}'s "
                                  "(a general set uses one system message, or none)")
        if embedded is not None and system_prompt is not None and embedded != system_prompt:
            raise GeneralSetError(f"{where}: the embedded system message differs from "
                                  "evaluation.general_regression.system_prompt; make them equal or drop one")
        if embedded is None and system_prompt is not None:
            messages.insert(0, {"role": "system", "content": system_prompt})
        key = normalize_prompt("\n".join(m["content"] for m in messages[:-1] if m["role"] == "user"))
        if key in seen_prompts:
            raise GeneralSetError(f"{where}: duplicate prompt (first at line {seen_prompts[key]})")
        seen_prompts[key] = line_no
        row_id = row_id or f"general-{line_no:06d}"
        if row_id in ids:
            raise GeneralSetError(f"{where}: duplicate id {row_id!r}")
        ids.add(row_id)
        rows.append({"id": row_id, "messages": messages, "line": line_no})
    if not rows:
        raise GeneralSetError(f"{path}: no rows")
    embedded = system[0] if system else None
    return GeneralSet(path, hashlib.sha256(data).hexdigest(), embedded if embedded is not None else system_prompt, rows)


def example_overlap(general: GeneralSet, example_inputs: Iterable[str]) -> Optional[str]:
    """The first row sharing a prompt with a spec example (`file:line: ...`), or None. Such a row measures the
    behavior the run tunes (trained on, or held out and scored twice), not general ability."""
    examples = example_keys(example_inputs)
    for row in general.rows:
        if found := overlapping_example(row["messages"][:-1], examples):
            return (f"{general.path}:{row['line']}: {found} (after normalization); the general-regression set must "
                    "not share prompts with the spec's examples: remove the row or the example")
    return None
