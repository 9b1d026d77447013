"""The shape of one chat JSONL row, checked the same way by the host and by every engine. Stdlib only.

A row is `{"messages": [{"role": "system"|"user"|"assistant", "content": str}, ...], "id"?: str}`.
What a row's turns must be (one user turn and one answer, or several turns)
is the caller's rule; this module checks everything else and raises the
caller's error class with a message starting `where:` (usually `file:line`).

Lines are read as bytes where possible (`read_lines`): a line that is not
UTF-8, JSON the parser refuses beyond syntax (an integer thousands of digits
long, nesting deeper than `tt_stagekit.userinput.MAX_DEPTH`, a duplicated key)
and a FIFO or device given as the file are all refused with `file:line`
(or the file), never a traceback or a hang.

It also holds the instruction compiler's two rules that an engine's own checks
need (`compile_system_message`, `normalize_prompt`): tt_host.spec.compiler
builds every run's system message and rows with them, and engines re-check
their datasets with the same functions instead of copies.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any, Iterable, Iterator, Optional

from tt_stagekit.userinput import InputFileError, JSONInputError, loads, read_regular

ROLES = ("system", "user", "assistant")
DEFAULT_SYSTEM_MESSAGE = "Follow the demonstrated behavior."


def compile_system_message(system_prompt: str, guidelines: Iterable[str], constraints: Iterable[str]) -> str:
    """The canonical system message (docs/host.md, Specs): the prompt, then `Guidelines:` and `Constraints:`
    as `- ` lists, blocks separated by a blank line; DEFAULT_SYSTEM_MESSAGE when all are empty."""
    blocks: list[str] = []
    if system_prompt.strip():
        blocks.append(system_prompt.strip())
    guidelines, constraints = [g.strip() for g in guidelines], [c.strip() for c in constraints]
    if guidelines:
        blocks.append("Guidelines:\n" + "\n".join(f"- {g}" for g in guidelines))
    if constraints:
        blocks.append("Constraints:\n" + "\n".join(f"- {c}" for c in constraints))
    return "\n\n".join(blocks) if blocks else DEFAULT_SYSTEM_MESSAGE


def normalize_prompt(text: str) -> str:
    """The form in which two prompts count as duplicates: NFKC, trimmed, spaces collapsed, lower-cased."""
    return re.sub(r"\s+", " ", unicodedata.normalize("NFKC", text)).strip().lower()


def read_lines(path: Any, error: type[Exception]) -> tuple[bytes, list[bytes]]:
    """(the file's bytes, its lines); a missing file, a folder, a FIFO or a device raises `error` naming it."""
    try:
        data = read_regular(path)
    except InputFileError as exc:
        raise error(str(exc)) from None
    return data, data.splitlines()


def parsed_lines(lines: Iterable[str | bytes], path: Any, error: type[Exception]) -> Iterator[tuple[int, str, Any]]:
    """(line number, `path:line`, parsed JSON) for each non-blank line; bad bytes or JSON raise `error` naming it."""
    for line_no, line in enumerate(lines, start=1):
        where = f"{path}:{line_no}"
        if isinstance(line, bytes):
            try:
                line = line.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise error(f"{where}: not UTF-8 (undecodable byte at column {exc.start + 1}); save the file as "
                            "UTF-8") from None
        if not line.strip():
            continue
        try:
            value = loads(line)
        except JSONInputError as exc:
            column = f" at column {exc.col}" if exc.col else ""
            raise error(f"{where}: {exc.located()}{column}") from None
        yield line_no, where, value


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
