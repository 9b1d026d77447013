"""One bounded HTTP POST to the teacher: a single deadline, a body cap, no redirects, depth-limited JSON.

A teacher is a server someone else runs, so nothing it sends may hold tt past a deadline or take its memory:

- **one deadline** covers connect, sending, the status line, the headers and the body: a timer shuts the
  socket down when it passes, so a server that trickles a byte a second ends there (`DeadlineExceeded`);
- **a body cap**: a 200 body longer than `cap` bytes stops being read at the cap (`TooLarge`); an error
  body is read only up to `ERROR_BODY_BYTES`, for its excerpt;
- **no redirects**: a 3xx is answered as it is (the caller refuses it, naming the Location), so the key
  never follows a redirect to another origin;
- `loads` parses JSON only when its nesting is at most `MAX_JSON_DEPTH` (`TooDeep` otherwise), so deeply
  nested JSON is a clear error, never a RecursionError;
- `printable` strips what would act on a terminal (C0/C1 controls, bidi and other format characters) from
  text a server chose (error bodies, Location headers) before it reaches a message.

stdlib only (http.client): the host stays torch-free and gains no dependency.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import ssl
import threading
import time
import unicodedata
from dataclasses import dataclass
from email.message import Message
from typing import Any, Mapping
from urllib.parse import urlsplit

ERROR_BODY_BYTES = 64 * 1024
MAX_JSON_DEPTH = 64
READ_CHUNK = 64 * 1024
_SIGNIFICANT = re.compile(rb'[\\"\[\]{}]')


class DeadlineExceeded(Exception):
    """The request did not complete (connect, headers and body) before its deadline."""


class TooLarge(Exception):
    """The body is longer than the cap."""


class TooDeep(ValueError):
    """JSON nested deeper than MAX_JSON_DEPTH (or brackets that do not pair)."""


@dataclass(frozen=True)
class Answer:
    status: int
    headers: Message
    body: bytes


def post(url: str, data: bytes, headers: Mapping[str, str], seconds: float, cap: int) -> Answer:
    """POST `data` to `url`; the answer, whatever its status (3xx included: never followed)."""
    deadline = time.monotonic() + seconds
    parts = urlsplit(url)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    if parts.scheme == "https":
        conn: http.client.HTTPConnection = http.client.HTTPSConnection(
            parts.hostname, parts.port, timeout=seconds, context=ssl.create_default_context())
    else:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=seconds)
    timer = threading.Timer(seconds, _cut, (conn,))
    timer.daemon = True
    timer.start()
    try:
        conn.connect()
        conn.request("POST", path, body=data, headers=dict(headers))
        response = conn.getresponse()
        limit = cap if response.status == 200 else ERROR_BODY_BYTES
        body = _read(response, limit, strict=response.status == 200)
    except TooLarge:
        raise
    except (OSError, http.client.HTTPException, ValueError):
        if time.monotonic() >= deadline:
            raise DeadlineExceeded from None
        raise
    finally:
        timer.cancel()
        conn.close()
    if time.monotonic() >= deadline:  # the timer cut the socket and the body ended early: not an answer
        raise DeadlineExceeded
    return Answer(response.status, response.msg, body)


def _cut(conn: http.client.HTTPConnection) -> None:
    sock = conn.sock
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _read(response: http.client.HTTPResponse, limit: int, strict: bool) -> bytes:
    declared = response.getheader("Content-Length")
    if strict and declared and declared.strip().isdigit() and int(declared) > limit:
        raise TooLarge(f"Content-Length {int(declared)}")
    chunks, total = [], 0
    while True:
        chunk = response.read(min(READ_CHUNK, limit + 1 - total))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
        if total > limit:
            if strict:
                raise TooLarge(f"more than {limit} bytes")
            return b"".join(chunks)[:limit]


def depth(raw: bytes | str, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether the JSON text nests at most `limit` deep, brackets inside strings not counted. One linear pass
    over the characters that matter (quotes, backslashes, brackets)."""
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    in_string, escaped_until, level = False, -1, 0
    for match in _SIGNIFICANT.finditer(data):
        at = match.start()
        if at < escaped_until:
            continue
        char = data[at]
        if in_string:
            if char == 0x5C:  # backslash: the next character is escaped
                escaped_until = at + 2
            elif char == 0x22:
                in_string = False
        elif char == 0x22:
            in_string = True
        elif char in b"[{":
            level += 1
            if level > limit:
                return False
        elif char in b"]}":
            level -= 1
    return True


def loads(raw: bytes | str, limit: int = MAX_JSON_DEPTH) -> Any:
    """json.loads, refusing text nested deeper than `limit` (TooDeep, a ValueError)."""
    if not depth(raw, limit):
        raise TooDeep(f"JSON nested deeper than {limit} levels")
    try:
        return json.loads(raw)
    except RecursionError:  # belt and braces: depth() already bounds it
        raise TooDeep(f"JSON nested deeper than {limit} levels") from None


def printable(text: str, limit: int = 200) -> str:
    """`text` on one line without control, bidi or other format characters, cut to `limit` characters."""
    kept = "".join(" " if char in "\n\r\t" else "" if unicodedata.category(char) in ("Cc", "Cf") else char
                   for char in text[: limit * 4])
    kept = kept.strip()
    return kept[:limit] + ("…" if len(kept) > limit else "")
