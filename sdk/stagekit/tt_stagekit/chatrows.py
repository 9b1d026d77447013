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

It also holds the instruction compiler's rule that an engine's own checks
need (`compile_system_message`) and hands on the one prompt key
(`normalize_prompt`, tt_stagekit.sameness): tt_host.spec.compiler builds every
run's system message and rows with them, and engines re-check their datasets
with the same functions instead of copies.
"""

from __future__ import annotations

import os
from typing import Any, Iterable, Iterator, Mapping, Optional

from tt_stagekit import rowformats
from tt_stagekit.sameness import normalize_prompt
from tt_stagekit.userinput import InputFileError, JSONInputError, loads, open_regular, read_regular

ROLES = ("system", "user", "assistant")
ROW_KEYS = ("id", "messages", "prompt", "completion") + rowformats.FORMAT_KEYS
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


def example_keys(example_inputs: Iterable[str]) -> dict[str, int]:
    """{normalized prompt: index} of a spec's examples, for `overlapping_example`."""
    return {normalize_prompt(text): index for index, text in enumerate(example_inputs)}


def overlapping_example(messages: list[dict], examples: Mapping[str, int]) -> Optional[str]:
    """How a training (or general-set) row shares a prompt with one of the spec's examples, or None.

    Compared, normalized: each user turn, then all user turns joined by newlines (a multi-turn row can carry
    an example's prompt in any turn). `examples`: `example_keys` of the spec's example inputs. The host splits
    examples into train and held-out itself, so any shared prompt could put a held-out one into training."""
    users = [m["content"] for m in messages if m["role"] == "user"]
    for turn, text in enumerate(users, start=1):
        index = examples.get(normalize_prompt(text))
        if index is not None:
            what = "its prompt" if len(users) == 1 else f"user turn {turn}"
            return f"{what} equals examples[{index}].input"
    index = examples.get(normalize_prompt("\n".join(users))) if len(users) > 1 else None
    return None if index is None else f"its user turns together equal examples[{index}].input"


def read_lines(path: Any, error: type[Exception]) -> tuple[bytes, list[bytes]]:
    """(the file's bytes, its lines); a missing file, a folder, a FIFO or a device raises `error` naming it."""
    try:
        data = read_regular(path)
    except InputFileError as exc:
        raise error(str(exc)) from None
    return data, data.splitlines()


def stream_lines(path: Any, error: type[Exception], limit: int) -> Iterator[bytes]:
    """Each line of a regular file (its line ending removed), read once and in order, never the whole file at
    once and never past `limit` bytes: a file over it is refused naming its size before a line is read (and one
    that grows past it while read, there); a missing file, a folder, a FIFO or a device raises `error` naming it."""
    try:
        handle = open_regular(path)
    except InputFileError as exc:
        raise error(str(exc)) from None
    with handle:
        size, read = os.fstat(handle.fileno()).st_size, 0
        for line in ([] if size > limit else handle):
            read += len(line)
            if read > limit:
                break
            yield (line[:-1] if line.endswith(b"\n") else line).removesuffix(b"\r")
        if size > limit or read > limit:
            raise error(f"{path} is {max(size, read):,} bytes, over the {limit:,}-byte limit for this file on this "
                        "machine; split it, or keep the rows that matter")


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
            raise error(f"{where}: malformed JSON ({exc.located()}{column})") from None
        yield line_no, where, value


def check_row(value: Any, where: str, error: type[Exception],
              roles: tuple[str, ...] = ROLES) -> tuple[Optional[str], list[dict[str, str]]]:
    """(the row's id or None, a copy of its messages); raises `error` naming `where` and the problem.

    `roles`: the message roles the caller accepts (the adapter also takes `tool` turns)."""
    if not isinstance(value, dict):
        raise error(f"{where}: a row must be a JSON object")
    unknown = sorted(set(value) - {"id", "messages"})
    if unknown and "messages" not in value and rowformats.refusal(value):
        raise error(f"{where}: {rowformats.refusal(value)}")
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
        if message["role"] not in roles:
            raise error(f"{where}: messages[{index}].role must be {', '.join(roles[:-1])} or {roles[-1]}")
        if not isinstance(message["content"], str) or not message["content"].strip():
            raise error(f"{where}: messages[{index}].content must be a non-empty string")
    return row_id, [dict(m) for m in messages]


def _as_messages(value: Any, where: str, key: str, role: str, error: type[Exception]) -> list:
    if isinstance(value, str):
        return [{"role": role, "content": value}]
    if isinstance(value, list):
        return value
    raise error(f"{where}: {key!r} must be a string or a list of messages")


def normalize_row(value: Any, where: str, error: type[Exception], ignored: Optional[dict] = None) -> Any:
    """A `{"id"?, "messages"}` object from a chat row, a prompt/completion row (`prompt` and `completion`
    each a string — a user message, an answer — or a list of messages, TRL's conversational form), or a
    ShareGPT or alpaca row (tt_stagekit.rowformats).

    Keys beyond id/messages/prompt/completion are dropped and counted into `ignored` (key -> rows), so the
    caller can warn once. Anything not an object is returned as is (check_row refuses it)."""
    if not isinstance(value, dict):
        return value
    if ignored is not None:
        for key in sorted(k for k in value if k not in ROW_KEYS):
            ignored[key] = ignored.get(key, 0) + 1
    if rowformats.detect(value):
        row = {"messages": rowformats.to_messages(value, where, error)}
    elif "prompt" in value or "completion" in value:
        if "messages" in value:
            raise error(f"{where}: give 'messages' or 'prompt' + 'completion', not both")
        if "prompt" not in value or "completion" not in value:
            missing = "completion" if "prompt" in value else "prompt"
            raise error(f"{where}: a prompt/completion row needs {missing!r} too")
        row = {"messages": _as_messages(value["prompt"], where, "prompt", "user", error)
               + _as_messages(value["completion"], where, "completion", "assistant", error)}
    else:
        row = {"messages": value.get("messages")}
    if "id" in value:
        row["id"] = value["id"]
    return row


def check_turns(messages: list[dict], where: str, error: type[Exception]) -> list[dict]:
    """The turns after an optional leading system message, which must start with a user message and end with
    an assistant answer (a multi-turn chat); raises `error` naming `where` otherwise."""
    roles = [m["role"] for m in messages]
    body = messages[1:] if roles[0] == "system" else messages
    if not body or body[-1]["role"] != "assistant" or "user" not in roles or \
            roles.index("user") > roles.index("assistant"):
        raise error(
            f"{where}: a row must be an optional system message, then turns starting with a user message and "
            f"ending with an assistant answer (got roles {roles})"
        )
    return body


def read_chat_file(path: Any, error: type[Exception], roles: tuple[str, ...] = ROLES,
                   system_message: Optional[str] = None, ignored: Optional[dict] = None) -> list[dict]:
    """Rows `{"id", "messages", "where"}` of a chat JSONL file (chat, prompt/completion, ShareGPT or alpaca rows, multi-turn);
    a leading system message must equal `system_message` when one is given. Raises `error` naming file:line."""
    rows: list[dict] = []
    _, lines = read_lines(path, error)
    for line_no, where, value in parsed_lines(lines, path, error):
        row_id, messages = check_row(normalize_row(value, where, error, ignored), where, error, roles)
        check_turns(messages, where, error)
        if messages[0]["role"] == "system" and system_message is not None and messages[0]["content"] != system_message:
            raise error(f"{where}: the system message differs from the spec's compiled system message")
        rows.append({"id": row_id or f"{path}:{line_no}", "messages": messages, "where": where})
    if not rows:
        raise error(f"{path}: no rows")
    return rows
