"""The stage side of docs/protocol.md: request, events, atomic result, stop flag."""

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


def write_json(path: str, data) -> None:
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
    with os.fdopen(fd, "w") as handle:
        json.dump(data, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


class StopFlag:
    def __init__(self) -> None:
        self.requested = False
        signal.signal(signal.SIGTERM, self._set)
        signal.signal(signal.SIGINT, self._set)

    def _set(self, signum, frame) -> None:
        self.requested = True
