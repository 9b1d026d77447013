"""The server log, `TT_HOME/logs/serve.log`: every line a `tt serve` server writes, appended, rotated by size.

Several `tt serve` processes may append to it at once, for days. Each opens it private (0600, in a 0700
`logs/`), in append mode, as a regular file only (tt_host.fsutil.open_regular): a symbolic link, FIFO or device
planted at `serve.log` or `serve.log.lock` is never written through or waited on; the log (or its rotation) is
off and `warn` (tt serve: a warning on the terminal) says which file to remove. After a write takes the file past `max_bytes`, the writer rotates it under an
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
from typing import IO, Callable, Optional

from tt_host.fsutil import NotARegularFile, make_private_dir, open_regular

NAME = "serve.log"
DEFAULT_MAX_MB = 64
DEFAULT_KEEP = 3


def _setting(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    return int(value) if value.isdigit() and int(value) > 0 else default


class ServeLog:
    """`with ServeLog(folder) as log: log.write(text)`; see the module docstring."""

    def __init__(self, folder: Path, max_bytes: Optional[int] = None, keep: Optional[int] = None,
                 warn: Callable[[str], None] = lambda message: None):
        self.path, self.warn, self.warned = folder / NAME, warn, set()
        self.max_bytes = max_bytes or _setting("TT_SERVE_LOG_MAX_MB", DEFAULT_MAX_MB) * 1024 * 1024
        self.keep = keep or _setting("TT_SERVE_LOG_KEEP", DEFAULT_KEEP)
        self.file: Optional[IO[str]] = None
        self._lock = threading.Lock()  # one server's stdout and stderr readers write from their own threads

    def __enter__(self) -> "ServeLog":
        try:
            make_private_dir(self.path.parent)
            self._open()
        except NotARegularFile as exc:
            self._refused(exc, "the server log is off")
        except OSError:
            self.file = None
        return self

    def _open(self) -> None:
        self.file = None
        self.file = open(open_regular(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "a", encoding="utf-8")

    def _refused(self, exc: NotARegularFile, what: str) -> None:
        """Say once per file that a planted file turned the log (or its rotation) off."""
        if exc.path not in self.warned:
            self.warned.add(exc.path)
            self.warn(f"{what}: {exc}")

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
        except NotARegularFile as exc:
            self._refused(exc, "the server log is off")
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
        try:  # never a FIFO: opening one would wait for a reader forever
            lock = open_regular(self.path.with_name(NAME + ".lock"), os.O_WRONLY | os.O_CREAT)
        except NotARegularFile as exc:
            self._refused(exc, "the server log is not rotated (it keeps growing)")
            return
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
