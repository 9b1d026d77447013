"""Small filesystem primitives: atomic private writes, private folders, file digests, exclusive locks.

Atomic writes and `sha256_file` are tt_stagekit.files' (one implementation for host and engines).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from pathlib import Path
from typing import Any

from tt_stagekit.files import atomic_write_bytes, file_sha256 as sha256_file  # noqa: F401 (tt_host's name)

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600


def make_private_dir(path: Path) -> Path:
    path.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
    os.chmod(path, PRIVATE_DIR)
    return path


def write_bytes_atomic(path: Path, data: bytes, mode: int = PRIVATE_FILE) -> None:
    """Write via a temp file in the same (existing) folder, fsync, then rename over the target
    (tt_stagekit.files.atomic_file, shared with the engines)."""
    atomic_write_bytes(path, data, mode, make_parents=False)


def write_json_atomic(path: Path, data: Any) -> None:
    write_bytes_atomic(path, (json.dumps(data, indent=2, sort_keys=False, ensure_ascii=False) + "\n").encode())


def write_text_atomic(path: Path, text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))


def remove_tree(path: Path) -> None:
    """Delete a folder the run made: renamed to a hidden name first, so a crash midway never leaves a
    half-deleted folder under its real name."""
    path = Path(path)
    if not path.exists():
        return
    trash = path.with_name(f".{path.name}.removing-{os.getpid()}")
    os.rename(path, trash)
    shutil.rmtree(trash)


class LockHeld(RuntimeError):
    def __init__(self, path: Path, holder: str):
        self.path, self.holder = path, holder
        super().__init__(f"{path} is locked by {holder}")


class FileLock:
    """An exclusive fcntl lock; the holder's description is written into the lock file.

    The kernel releases it when the last process holding its descriptor dies, so a
    SIGKILLed holder never leaves a stale lock behind; a child process that inherits
    the descriptor keeps the lock held while it lives.
    """

    def __init__(self, path: Path, holder: str = ""):
        self.path, self.holder = Path(path), holder
        self._fd: int | None = None

    def acquire(self, blocking: bool = False) -> "FileLock":
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, PRIVATE_FILE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            held_by = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip() or "another process"
            os.close(fd)
            raise LockHeld(self.path, held_by) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, self.holder.encode(), 0)
        self._fd = fd
        return self

    def fileno(self) -> int | None:
        return self._fd

    def describe(self, holder: str) -> None:
        """Replace the holder's description written in the lock file."""
        if self._fd is not None:
            self.holder = holder
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, holder.encode(), 0)

    def release(self) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "FileLock":
        return self.acquire(blocking=True) if self._fd is None else self

    def __exit__(self, *exc: object) -> None:
        self.release()


def processes_holding(path: Path) -> list[int]:
    """Pids of the processes with `path` open, found through /proc (Linux; [] elsewhere or when unreadable)."""
    target = os.path.realpath(path)
    found = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{entry}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{entry}/fd/{fd}") == target:
                    found.append(int(entry))
                    break
            except OSError:
                continue
    return sorted(found)
