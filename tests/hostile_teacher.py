"""A hostile OpenAI-compatible teacher on loopback (a real HTTP server, http.server on its own threads), for the
synthesis client's bounds (tests/host/synthesis/test_teacher_hostile.py, bench/teacher_hostile.py).

`HostileTeacher(mode)` answers every POST the way `mode` says:

- `trickle_body`: a 200 with complete headers (Content-Length 50 000), then one body byte a second;
- `trickle_headers`: the status line, then one header byte a second, never ending the headers;
- `huge`: a 200 without Content-Length streaming JSON-looking bytes, 64 KiB at a time, for `huge_bytes`
  (default 300 MB), never holding more than one chunk;
- `deep`: a 200 whose body is a chat completion nested `depth` (default 40 000, under the body cap) arrays deep;
- `deep_content`: a well-formed chat completion whose *content* is JSON nested `depth` arrays deep (what
  an inputs reply or a `valid_json` check parses);
- `redirect`: a 302 to `location` (default: another server's address);
- `retry_after`: a 429 with `Retry-After: 300` every time;
- `loop429`: a 429 without Retry-After every time;
- `escapes`: a 400 whose body is terminal escape sequences (clear screen, set title, bidi override).

Every request's arrival time and Authorization header are recorded (`times`, `auth`). `python
tests/hostile_teacher.py MODE` serves one in its own process and prints its URL (the bench measures the client
without the server's memory).
"""

from __future__ import annotations

import sys
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
from teacher_stub import LoopbackHTTP  # noqa: E402

ESCAPES = b"\x1b[2J\x1b]0;owned\x07\xe2\x80\xaeevil\x1b[31m red"
CHUNK = b'{"pad": "' + b"x" * (64 * 1024 - 20) + b'"},\n'


class HostileTeacher(LoopbackHTTP):
    def __init__(self, mode: str, *, location: Optional[str] = None, huge_bytes: int = 300 * 1024 * 1024,
                 depth: int = 40_000):
        self.mode, self.location, self.huge_bytes, self.depth = mode, location, huge_bytes, depth
        self.times: list[float] = []
        self.auth: list[Optional[str]] = []
        self.sent_bytes = 0
        teacher = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def handle(self) -> None:
                try:
                    super().handle()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client hung up: what a bounded client does

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                teacher.times.append(time.monotonic())
                teacher.auth.append(self.headers.get("Authorization"))
                try:
                    getattr(teacher, f"_{teacher.mode}")(self)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client hung up: what a bounded client does

            do_GET = do_POST

        self.serve(Handler)

    def _head(self, handler, status: int, headers: dict[str, str]) -> None:
        handler.send_response(status)
        for key, value in headers.items():
            handler.send_header(key, value)
        handler.end_headers()

    def _trickle_body(self, handler) -> None:
        self._head(handler, 200, {"Content-Type": "application/json", "Content-Length": "50000"})
        for _ in range(3600):
            handler.wfile.write(b" ")
            handler.wfile.flush()
            time.sleep(1)

    def _trickle_headers(self, handler) -> None:
        handler.wfile.write(b"HTTP/1.1 200 OK\r\n")
        for _ in range(3600):
            handler.wfile.write(b"X")
            handler.wfile.flush()
            time.sleep(1)

    def _huge(self, handler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Connection", "close")
        handler.end_headers()
        handler.close_connection = True
        handler.wfile.write(b'{"choices": [')
        while self.sent_bytes < self.huge_bytes:
            handler.wfile.write(CHUNK)
            self.sent_bytes += len(CHUNK)
        handler.wfile.write(b"{}]}")

    def _deep(self, handler) -> None:
        body = (b'{"choices": [{"message": {"content": "x"}}], "extra": ' + b"[" * self.depth + b"]" * self.depth
                + b"}")
        self._head(handler, 200, {"Content-Type": "application/json", "Content-Length": str(len(body))})
        handler.wfile.write(body)

    def _deep_content(self, handler) -> None:
        content = "[" * self.depth + "]" * self.depth
        body = ('{"choices": [{"message": {"role": "assistant", "content": "' + content + '"}}]}').encode()
        self._head(handler, 200, {"Content-Type": "application/json", "Content-Length": str(len(body))})
        handler.wfile.write(body)

    def _redirect(self, handler) -> None:
        self._head(handler, 302, {"Location": self.location or "http://127.0.0.1:9/v1/chat/completions",
                                  "Content-Length": "0"})

    def _retry_after(self, handler) -> None:
        self._head(handler, 429, {"Retry-After": "300", "Content-Length": "9"})
        handler.wfile.write(b"slow down")

    def _loop429(self, handler) -> None:
        self._head(handler, 429, {"Content-Length": "9"})
        handler.wfile.write(b"slow down")

    def _escapes(self, handler) -> None:
        self._head(handler, 400, {"Content-Length": str(len(ESCAPES))})
        handler.wfile.write(ESCAPES)


if __name__ == "__main__":
    with HostileTeacher(sys.argv[1]) as served:
        print(served.url, flush=True)
        sys.stdin.read()  # serve until the parent closes stdin
