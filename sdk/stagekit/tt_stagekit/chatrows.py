"""The shape of one chat JSONL row, checked the same way by the host and by every engine. Stdlib only.

A row is `{"messages": [{"role": "system"|"user"|"assistant", "content": str}, ...], "id"?: str}`.
What a row's turns must be (one user turn and one answer, or several turns)
is the caller's rule; this module checks everything else and raises the
caller's error class with a message starting `where:` (usually `file:line`).
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Iterator, Optional

ROLES = ("system", "user", "assistant")


def parsed_lines(lines: Iterable[str], path: Any, error: type[Exception]) -> Iterator[tuple[int, str, Any]]:
    """(line number, `path:line`, parsed JSON) for each non-blank line; invalid JSON raises `error` naming it."""
    for line_no, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{line_no}"
        try:
            yield line_no, where, json.loads(line)
        except json.JSONDecodeError as exc:
            raise error(f"{where}: invalid JSON: {exc.msg}") from None


def check_row(value: Any, where: str, error: type[Exception]) -> tuple[Optional[str], list[dict[str, str]]]:
    """(the row's id or None, a copy of its messages); raises `error` naming `where` and the problem."""
    if not isinstance(value, dict):
        raise error(f"{where}: a row must be a JSON object")
    unknown = sorted(set(value) - {"id", "messages"})
    if unknown:
        raise error(f"{where}: unknown key {unknown[0]!r} (a row has 'messages' and an optional 'id')")
    row_id = value.get("id")
    if row_id is not None and (not isinstance(row_id, str) or not row_id.strip()):
        raise error(f"{where}: 'id' must be a non-empty string")
    messages = value.get("messages")
    if not isinstance(messages, list) or not messages:
        raise error(f"{where}: 'messages' must be a non-empty list")
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or set(message) != {"role", "content"}:
            raise error(f"{where}: messages[{index}] must be an object with exactly 'role' and 'content'")
        if message["role"] not in ROLES:
            raise error(f"{where}: messages[{index}].role must be system, user or assistant")
        if not isinstance(message["content"], str) or not message["content"].strip():
            raise error(f"{where}: messages[{index}].content must be a non-empty string")
    return row_id, [dict(m) for m in messages]
