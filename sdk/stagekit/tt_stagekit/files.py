"""File primitives shared by the host and every engine: atomic writes, publishing a folder, file digests, appending
a line to a log.

Stdlib only. `atomic_file` writes to a temp file in the target's folder, flushes, fsyncs, sets the mode and renames
it over the target, then fsyncs the folder: a reader sees the old file or the new one, never half of
one. `publish_folder` does the same for a folder built beside its target (every "build a folder, fsync,
rename into place" in tt), with what happens to an existing target as a parameter. `file_sha256` is the
digest every manifest, fingerprint and cache in tt records. `append_line` adds one line to an engine's append-only
log (0600, O_APPEND, one fsync a line). tt_host.fsutil and the engines use these;
none keeps a copy.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, BinaryIO, Iterator, Mapping, Optional, Sequence

from tt_stagekit.contract import InvalidInput

PRIVATE_FILE = 0o600
CHUNK = 1 << 20


def fsync_dir(path: str | Path) -> None:
    """Make a rename or a new file in `path` durable (best effort where folders cannot be opened)."""
    try:
        fd = os.open(str(path), os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_file(path: str | Path, mode: int = PRIVATE_FILE, make_parents: bool = True) -> Iterator[BinaryIO]:
    """A binary file handle whose content replaces `path` only when the block ends without error.

    On error the temp file is removed and `path` is untouched. `make_parents=False` refuses a missing
    folder (FileNotFoundError) instead of creating it.
    """
    path = Path(path)
    if make_parents:
        path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def atomic_write_bytes(path: str | Path, data: bytes, mode: int = PRIVATE_FILE, make_parents: bool = True) -> None:
    with atomic_file(path, mode, make_parents) as handle:
        handle.write(data)


def json_default(value: Any) -> Any:
    """JSON for what json cannot write itself: numpy and torch scalars, paths."""
    if hasattr(value, "item"):  # numpy and torch scalars
        return value.item()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def atomic_write_json(path: str | Path, value: Any) -> None:
    text = json.dumps(value, indent=2, ensure_ascii=False, default=json_default) + "\n"
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_jsonl(path: str | Path, rows: Sequence[Mapping[str, Any]]) -> None:
    text = "".join(json.dumps(row, ensure_ascii=False, default=json_default) + "\n" for row in rows)
    atomic_write_bytes(path, text.encode("utf-8"))


# What publish_folder does with a target that already exists.
REFUSE = "refuse"  # FileExistsError; the built folder is removed, the target untouched
REPLACE = "replace"  # the old target is renamed aside, the new one renamed in, then the old one removed
KEEP = "keep"  # the old target is renamed aside to `<name>.replaced-<local time>-<pid>` and kept
POLICIES = (REFUSE, REPLACE, KEEP)


def publish_folder(built: str | Path, target: str | Path, existing: str = REFUSE, *,
                   sync_files: bool = False) -> Optional[Path]:
    """Publish the finished folder `built` (beside `target`) as `target` with one rename, durably.

    `sync_files` fsyncs every file under `built` first (leave it off when the caller synced them as it
    wrote); the folder and, after the rename, its parent are fsynced. `existing` is REFUSE, REPLACE or
    KEEP (above). Returns where KEEP put the old target, else None.
    """
    if existing not in POLICIES:
        raise ValueError(f"existing must be one of {', '.join(POLICIES)}, not {existing!r}")
    built, target = Path(built), Path(target)
    if sync_files:
        for path in built.rglob("*"):
            if path.is_file():
                with open(path, "rb") as handle:
                    os.fsync(handle.fileno())
    fsync_dir(built)
    aside = None
    if target.exists():
        if existing == REFUSE:
            shutil.rmtree(built, ignore_errors=True)
            raise FileExistsError(errno.EEXIST, "already exists", str(target))
        if existing == REPLACE:
            aside = target.with_name(f".{target.name}.{os.getpid()}.old")
        else:
            aside = target.with_name(f"{target.name}.replaced-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}")
        os.replace(target, aside)
    os.replace(built, target)
    if existing == REPLACE and aside is not None:
        shutil.rmtree(aside, ignore_errors=True)
        aside = None
    fsync_dir(target.parent)
    return aside


@contextlib.contextmanager
def new_folder(target: str | Path) -> Iterator[Path]:
    """Build a folder beside `target`, then publish it as `target`: every file fsynced, one rename.

    Never overwrites: a `target` that appeared meanwhile is refused (InvalidInput); on any error
    the partial folder is removed and `target` is untouched.
    """
    target = Path(target)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(mode=0o700)
    try:
        yield tmp
        try:
            publish_folder(tmp, target, REFUSE, sync_files=True)
        except FileExistsError:
            raise InvalidInput(f"{target} appeared while it was being written; nothing was overwritten") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def file_sha256(path: str | Path, chunk: int = CHUNK) -> str:
    """The sha256 hex digest of a file's bytes, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(chunk), b""):
            digest.update(block)
    return digest.hexdigest()


def append_line(path: str | Path, line: str) -> None:
    """Append one line to an append-only log (an engine's heartbeats, a rollout log): opened O_APPEND, never
    through a symbolic link, mode 0600 whatever the umask (a file an older tt left wider is narrowed), one write
    and one fsync per line. Its folder is made when missing."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = (line if line.endswith("\n") else line + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, PRIVATE_FILE)
    try:
        if os.fstat(fd).st_mode & 0o777 != PRIVATE_FILE:
            os.fchmod(fd, PRIVATE_FILE)
        if os.write(fd, data) != len(data):
            raise OSError(errno.EIO, f"short write to {path}")
        os.fsync(fd)
    finally:
        os.close(fd)
