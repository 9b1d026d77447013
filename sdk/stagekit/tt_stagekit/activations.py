"""The activation history's replay, shared by the host (`tt models active`) and a server that answers
`model: "active"` (stdlib only).

`$TT_HOME/activations.jsonl` holds one JSON record per line, appended whole (docs/serving.md, Activation):
activate pushes, rollback pops; the active model is the top of the stack. A torn last line (no newline: a
writer killed mid-append) is never a committed record and is left out.
"""

from __future__ import annotations

import json
from typing import Any, Optional


def parse(data: bytes) -> tuple[list[dict[str, Any]], Optional[int]]:
    """(the records, oldest first; the number of the first line that is not a record, or None)."""
    lines = data.split(b"\n")
    lines.pop()  # after the last newline: b"" or a torn last line
    records = []
    for number, line in enumerate(lines, 1):
        try:
            record = json.loads(line.decode("utf-8"))
        except (ValueError, RecursionError):
            record = None
        if not isinstance(record, dict) or record.get("action") not in ("activate", "rollback") or (
                record["action"] == "activate" and not isinstance(record.get("model"), str)):
            return records, number
        records.append(record)
    return records, None


def replay(records: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], Optional[dict[str, Any]]]:
    """The activate records still on the stack (activate pushes, rollback pops) and the last record."""
    stack: list[dict[str, Any]] = []
    for record in records:
        if record.get("action") == "activate":
            stack.append(record)
        elif record.get("action") == "rollback" and stack:
            stack.pop()
    return stack, (records[-1] if records else None)
