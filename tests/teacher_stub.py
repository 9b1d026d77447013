"""A deterministic OpenAI-compatible teacher on loopback for the synthesis tests: a real HTTP server
(http.server on its own thread) that answers POST /v1/chat/completions.

- An inputs request (its user turn asks for "a JSON array of N strings") is answered with N new prompts
  made from the request's `seed` (`propose(first, count)`, default `Capital of place <k>?`), plus every prompt in `echo` verbatim and in a
  changed case and spacing (so a teacher that repeats the spec's held-out prompts is simulated);
- an answer request is answered by `answer(prompt)` (default: the label the task wants, `City <k>`);
- `faults` is a list of (status, headers, body) served to the first requests in order (429 with
  Retry-After, 500, ...), before normal answers resume;
- `hold_after=K` lets K requests through, then holds every later one until `release` is set; `held` is set
  when the first held request arrives (tests wait on it, never on a duration);
- `silent=True` accepts connections and never answers (until `release`).

Every request body, its Authorization header and arrival time are recorded (`requests`, `auth`, `times`).
"""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Optional, Sequence

COUNT = re.compile(r"JSON array of (\d+) string")
PLACE = re.compile(r"place (\d+)")


def default_answer(prompt: str) -> str:
    match = PLACE.search(prompt)
    return f"City {match.group(1)}" if match else "I do not know."


class LoopbackHTTP:
    """An http.server on 127.0.0.1 (a free port), serving on daemon threads while the `with` block runs."""

    def serve(self, handler: type) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


class StubTeacher(LoopbackHTTP):
    def __init__(self, *, echo: Sequence[str] = (), answer: Callable[[str], str] = default_answer,
                 propose: Callable[[int, int], list[str]] = lambda first, count: [
                     f"Capital of place {first + i}?" for i in range(count)],
                 faults: Sequence[tuple[int, dict, bytes]] = (), hold_after: Optional[int] = None,
                 silent: bool = False, start: int = 1000):
        self.echo, self.answer, self.propose, self.faults = list(echo), answer, propose, list(faults)
        self.hold_after, self.silent, self.start = hold_after, silent, start
        self.requests: list[dict] = []
        self.auth: list[Optional[str]] = []
        self.times: list[float] = []  # time.monotonic() of each request's arrival
        self.answered = 0
        self.lock = threading.Lock()
        self.held, self.release = threading.Event(), threading.Event()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                with stub.lock:
                    stub.requests.append(body)
                    stub.auth.append(self.headers.get("Authorization"))
                    stub.times.append(time.monotonic())
                    number = len(stub.requests)
                    fault = stub.faults.pop(0) if stub.faults else None
                if stub.silent or (stub.hold_after is not None and number > stub.hold_after):
                    stub.held.set()
                    stub.release.wait()
                    if stub.silent:
                        return
                if fault is not None:
                    status, headers, payload = fault
                    self.send_response(status)
                    for key, value in headers.items():
                        self.send_header(key, value)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                content = stub.reply(body)
                data = json.dumps({"id": f"stub-{number}", "object": "chat.completion", "model": body.get("model"),
                                   "choices": [{"index": 0, "finish_reason": "stop",
                                                "message": {"role": "assistant", "content": content}}],
                                   "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                with stub.lock:
                    stub.answered += 1

        self.serve(Handler)

    def reply(self, body: dict) -> str:
        user = body["messages"][-1]["content"]
        wanted = COUNT.search(user)
        if wanted:
            count, seed = int(wanted.group(1)), int(body.get("seed", 0))
            new = self.propose(self.start + seed * count, count)
            variants = [f"  {text.upper()}  " for text in self.echo]
            return json.dumps(self.echo + variants + new)
        return self.answer(user)

    def __exit__(self, *exc) -> None:
        self.release.set()
        super().__exit__(*exc)
