"""The server log, `TT_HOME/logs/serve.log`: every line a `tt serve` server writes, appended, rotated by size.

Several `tt serve` processes may append to it at once, for days. Each opens it private (0600), in append mode,
never through a symbolic link. After a write takes the file past `max_bytes`, the writer rotates it under an
exclusive lock on `serve.log.lock`: `serve.log.(keep-1)` → `serve.log.keep`, …, `serve.log` → `serve.log.1`
(the oldest beyond `keep` is removed), then a new `serve.log`. The other writers see that the path no longer
names the file they hold (one stat per write) and reopen it; a line written between the rename and their
reopen lands in `serve.log.1`, so no line is lost unless a writer is still behind by `keep` whole rotations.
Writing never stops the server: a full disk or a failed rotation loses log lines, not the server.

`TT_SERVE_LOG_MAX_MB` (default 64) and `TT_SERVE_LOG_KEEP` (default 3) set the size and the number of old files.
"""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path
from typing import IO, Optional

NAME = "serve.log"
DEFAULT_MAX_MB = 64
DEFAULT_KEEP = 3


def _setting(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    return int(value) if value.isdigit() and int(value) > 0 else default


class ServeLog:
    """`with ServeLog(folder) as log: log.write(text)`; see the module docstring."""

    def __init__(self, folder: Path, max_bytes: Optional[int] = None, keep: Optional[int] = None):
        self.path = folder / NAME
        self.max_bytes = max_bytes or _setting("TT_SERVE_LOG_MAX_MB", DEFAULT_MAX_MB) * 1024 * 1024
        self.keep = keep or _setting("TT_SERVE_LOG_KEEP", DEFAULT_KEEP)
        self.file: Optional[IO[str]] = None
        self._lock = threading.Lock()  # one server's stdout and stderr readers write from their own threads

    def __enter__(self) -> "ServeLog":
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._open()
        except OSError:
            self.file = None
        return self

    def _open(self) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        self.file = open(fd, "a", encoding="utf-8")

    def write(self, text: str) -> None:
        with self._lock:
            self._write(text)

    def _write(self, text: str) -> None:
        if self.file is None:
            return
        try:
            if self._moved():
                self.file.close()
                self._open()
            self.file.write(text)
            self.file.flush()
            if os.fstat(self.file.fileno()).st_size >= self.max_bytes:
                self._rotate()
        except OSError:
            self.file = None

    def _moved(self) -> bool:
        """Whether the path names another file than the one held (another writer rotated it)."""
        assert self.file is not None
        held = os.fstat(self.file.fileno())
        try:
            named = os.stat(self.path, follow_symlinks=False)
        except FileNotFoundError:
            return True
        return (named.st_dev, named.st_ino) != (held.st_dev, held.st_ino)

    def _rotate(self) -> None:
        lock = os.open(self.path.with_name(NAME + ".lock"), os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not self._moved() and os.stat(self.path).st_size >= self.max_bytes:  # nobody rotated meanwhile
                for k in range(self.keep, 0, -1):  # the oldest is replaced by the one before it
                    source = self.path if k == 1 else self.path.with_name(f"{NAME}.{k - 1}")
                    if source.exists():
                        os.replace(source, self.path.with_name(f"{NAME}.{k}"))
            assert self.file is not None
            self.file.close()
            self._open()
        finally:
            os.close(lock)

    def __exit__(self, *exc: object) -> None:
        if self.file is not None:
            try:
                self.file.close()
            except OSError:
                pass
