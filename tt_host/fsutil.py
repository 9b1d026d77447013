"""Small filesystem primitives: atomic private writes, private folders, file digests, exclusive locks."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600


def make_private_dir(path: Path) -> Path:
    path.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
    os.chmod(path, PRIVATE_DIR)
    return path


def write_bytes_atomic(path: Path, data: bytes, mode: int = PRIVATE_FILE) -> None:
    """Write via a temp file in the same folder, fsync, then rename over the target."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


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


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


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
