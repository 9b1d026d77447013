"""The server's line to `tt serve` (the host), for `POST /admin/adapters`: only the host resolves a registered
model (its id, unique prefix or `ID@n`) and checks its base, so the server never loads a folder a client names.

The server writes `{"type": "model_request", "ref": n, "model": "..."}` on stdout (an event line, as the
ready line); the host answers one JSON line on the server's stdin: `{"ref": n, "model": {ServedModel}}` or
`{"ref": n, "error": "...", "status": 4xx}`. A server started by hand has no host (`host_channel` false) and
answers such a request 503.
"""

from __future__ import annotations

import itertools
import json
import sys
import threading
from typing import Any, Optional

from tt_stagekit.contract import ServedModel
from tt_stagekit.protocol import emit
from tt_stagekit.stageconfig import parse
from tt_engine_adapter.serve.request import ApiError

ANSWER_SECONDS = 120.0  # the host verifies the adapter's files before it answers


class HostLink:
    """Questions to the host and their answers (a reader thread on stdin)."""

    def __init__(self, stream: Any = None):
        self._stream = stream if stream is not None else sys.stdin
        self._refs = itertools.count(1)
        self._lock = threading.Lock()
        self._waiting: dict[int, tuple[threading.Event, list]] = {}
        self._closed = False
        threading.Thread(target=self._read, name="tt-host-link", daemon=True).start()

    def ask(self, model: str) -> ServedModel:
        """The registered adapter `model` names, as the host resolved and verified it; ApiError otherwise."""
        ref = next(self._refs)
        done, box = threading.Event(), []
        with self._lock:
            if self._closed:
                raise ApiError(503, "the host (tt serve) no longer answers; restart the server", None,
                               "host_unavailable", "server_error")
            self._waiting[ref] = (done, box)
        emit({"type": "model_request", "ref": ref, "model": model})
        if not done.wait(ANSWER_SECONDS) or not box:
            with self._lock:
                self._waiting.pop(ref, None)
            raise ApiError(503, "the host (tt serve) did not answer in time", None, "host_unavailable",
                           "server_error")
        answer = box[0]
        if answer.get("error") is not None:
            status = answer.get("status") if answer.get("status") in (400, 404, 409, 422) else 400
            raise ApiError(status, str(answer["error"]), "model", "adapter_refused")
        return parse(ServedModel, answer.get("model"), "model")

    def _read(self) -> None:
        try:
            for line in self._stream:
                try:
                    answer = json.loads(line)
                except ValueError:
                    continue
                if not isinstance(answer, dict):
                    continue
                with self._lock:
                    waiting = self._waiting.pop(answer.get("ref"), None)
                if waiting is not None:
                    waiting[1].append(answer)
                    waiting[0].set()
        finally:
            with self._lock:
                self._closed = True
                for done, _ in self._waiting.values():
                    done.set()
                self._waiting.clear()


def host_link(enabled: bool) -> Optional[HostLink]:
    return HostLink() if enabled else None
