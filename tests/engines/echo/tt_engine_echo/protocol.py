"""The stage side of docs/protocol.md: request, events, atomic result, stop flag.

A test fault hook: with `TT_ECHO_KILL_AT=MODULE:N` in its environment, the stage
whose main module is MODULE (e.g. `tt_engine_echo.stages.train`) kills itself
(SIGKILL) at its Nth atomic write, after the temporary file is written and
before it is renamed into place (tests/host/runs/test_crash_points.py)."""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile


def read_request() -> dict:
    with open(sys.argv[1], encoding="utf-8") as handle:
        return json.load(handle)


def emit(event_type: str, **fields) -> None:
    sys.stdout.write(json.dumps({"type": event_type, **fields}) + "\n")
    sys.stdout.flush()


_writes = 0


def _maybe_crash() -> None:
    global _writes
    _writes += 1
    target = os.environ.get("TT_ECHO_KILL_AT", "")
    main = getattr(sys.modules["__main__"].__spec__, "name", "")
    if target and target == f"{main}:{_writes}":
        os.kill(os.getpid(), signal.SIGKILL)


def write_json(path: str, data) -> None:
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
    with os.fdopen(fd, "w") as handle:
        json.dump(data, handle)
        handle.flush()
        os.fsync(handle.fileno())
    _maybe_crash()
    os.replace(tmp, path)
    folder = os.open(os.path.dirname(path) or ".", os.O_RDONLY)  # the rename durable, as tt_stagekit's writers do
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


class StopFlag:
    def __init__(self) -> None:
        self.requested = False
        signal.signal(signal.SIGTERM, self._set)
        signal.signal(signal.SIGINT, self._set)

    def _set(self, signum, frame) -> None:
        self.requested = True
