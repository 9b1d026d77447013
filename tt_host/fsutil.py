"""Small filesystem primitives: atomic private writes, private folders, file digests, exclusive locks, appends.

Atomic writes and `sha256_file` are tt_stagekit.files' (one implementation for host and engines). Locks and
appends open their file as a file (`open_regular`): never through a symbolic link (O_NOFOLLOW), never a FIFO,
device or folder, so a planted `run/.tt-run.lock -> victim.txt` is refused instead of truncating the victim.
An append (`append_line`) first repairs a torn last line a killed writer left, so the new record is a line
of its own.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import stat
from pathlib import Path
from typing import Any

from tt_stagekit.files import atomic_write_bytes, file_sha256 as sha256_file  # noqa: F401 (tt_host's name)

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600


def make_private_dir(path: Path) -> Path:
    path.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
    os.chmod(path, PRIVATE_DIR)
    return path


NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def free_bytes(path: Path) -> int:
    """Free bytes for this user on the filesystem of `path` (or of its nearest existing parent)."""
    probe = Path(path).absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        return shutil.disk_usage(probe).free
    except OSError:
        return 0


class DiskFull(OSError):
    """A write that found no space (ENOSPC, or EDQUOT: over quota): names the file, the bytes it needed and the
    bytes free there."""

    def __init__(self, path: Path, needed: int, free: int):
        self.path, self.needed, self.free = Path(path), needed, free
        super().__init__(errno.ENOSPC, "no space left on device", str(path))

    def __str__(self) -> str:
        return (f"no space left on the disk of {self.path}: writing it needs {self.needed:,} bytes, "
                f"{self.free:,} are free there; free some space (or set a run folder elsewhere with --resume)")


def is_disk_full(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in NO_SPACE


def write_bytes_atomic(path: Path, data: bytes, mode: int = PRIVATE_FILE) -> None:
    """Write via a temp file in the same (existing) folder, fsync, then rename over the target
    (tt_stagekit.files.atomic_file, shared with the engines). No space: DiskFull naming the file."""
    try:
        atomic_write_bytes(path, data, mode, make_parents=False)
    except OSError as exc:
        if not is_disk_full(exc) or isinstance(exc, DiskFull):
            raise
        raise DiskFull(path, len(data), free_bytes(Path(path).parent)) from None


def reserve_space(path: Path, size: int) -> None:
    """Allocate `size` bytes at `path` (a regular file, never through a link), to be released when the disk
    fills, so that the last records (run.json, the report) still fit. No space: DiskFull."""
    try:
        fd = open_regular(path, os.O_WRONLY | os.O_CREAT)
        try:
            os.posix_fallocate(fd, 0, size)
        finally:
            os.close(fd)
    except OSError as exc:
        if not is_disk_full(exc):
            raise
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise DiskFull(path, size, free_bytes(Path(path).parent)) from None


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


class NotARegularFile(OSError):
    """A lock or append target that is a symbolic link, FIFO, device or folder: never opened, never written."""

    def __init__(self, path: Path, kind: str):
        self.path, self.kind = Path(path), kind
        super().__init__(f"{path} is {kind}, not a regular file; tt never writes through it: remove it "
                         "(tt makes it again) and retry")


def open_regular(path: Path, flags: int, mode: int = PRIVATE_FILE) -> int:
    """os.open `path` as a regular file only: O_NOFOLLOW (a symbolic link is refused, even a dangling one),
    O_NONBLOCK while opening (a FIFO never blocks the open), then fstat (a FIFO, device or folder is refused).
    Raises NotARegularFile naming what it found."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP or (os.path.islink(path) and exc.errno in (errno.EEXIST, errno.ENOENT)):
            raise NotARegularFile(path, f"a symbolic link (to {os.readlink(path)})") from None
        if exc.errno == errno.EISDIR:
            raise NotARegularFile(path, "a folder") from None
        if exc.errno == errno.ENXIO:  # a FIFO opened for writing with no reader (O_NONBLOCK), or a socket
            raise NotARegularFile(path, "a FIFO or socket") from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        kind = {stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
                stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a folder"}.get(stat.S_IFMT(st.st_mode), "not a file")
        raise NotARegularFile(path, kind)
    os.set_blocking(fd, True)
    return fd


def _repair_torn_end(fd: int) -> None:
    """A file of lines whose last line has no newline (a writer killed mid-append): a fragment that is a
    whole JSON value gets its newline back; any other fragment (never a committed record) is cut off."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return
    start = size
    while start > 0:
        chunk = os.pread(fd, min(4096, start), max(0, start - 4096))
        cut = chunk.rfind(b"\n")
        if cut >= 0:
            start = start - len(chunk) + cut + 1
            break
        start -= len(chunk)
    fragment = os.pread(fd, size - start, start)
    try:
        whole = isinstance(json.loads(fragment), dict)
    except ValueError:
        whole = False
    if whole:
        os.write(fd, b"\n")
    else:
        os.ftruncate(fd, start)


def append_line(path: Path, line: bytes) -> None:
    """Append one whole line (newline-terminated) to a file of records: opened as a regular file only, a torn
    last line repaired first (`_repair_torn_end`), one write, fsync. Call it under the file's lock."""
    if not line.endswith(b"\n"):
        line += b"\n"
    fd = open_regular(path, os.O_RDWR | os.O_APPEND | os.O_CREAT)
    try:
        _repair_torn_end(fd)
        if os.write(fd, line) != len(line):
            raise OSError(errno.EIO, f"short write to {path}")
        os.fsync(fd)
    except OSError as exc:
        if not is_disk_full(exc):
            raise
        raise DiskFull(path, len(line), free_bytes(Path(path).parent)) from None
    finally:
        os.close(fd)


class LockHeld(RuntimeError):
    def __init__(self, path: Path, holder: str):
        self.path, self.holder = path, holder
        super().__init__(f"{path} is locked by {holder}")


def _write_holder(fd: int, holder: str) -> None:
    """Write who holds a lock into its file: information for a refused second process, so a full disk (where
    even these bytes do not fit) leaves it empty rather than failing the lock the kernel already granted."""
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, holder.encode(), 0)
    except OSError as exc:
        if not is_disk_full(exc):
            raise


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
        fd = open_regular(self.path, os.O_RDWR | os.O_CREAT)  # never through a link, never a FIFO
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            held_by = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip() or "another process"
            os.close(fd)
            raise LockHeld(self.path, held_by) from None
        _write_holder(fd, self.holder)
        self._fd = fd
        return self

    def fileno(self) -> int | None:
        return self._fd

    def describe(self, holder: str) -> None:
        """Replace the holder's description written in the lock file."""
        if self._fd is not None:
            self.holder = holder
            _write_holder(self._fd, holder)

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
