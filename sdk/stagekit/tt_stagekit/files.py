"""File primitives shared by the host and every engine: atomic writes and file digests. Stdlib only.

`atomic_file` writes to a temp file in the target's folder, flushes, fsyncs, sets the mode and renames
it over the target, then fsyncs the folder: a reader sees the old file or the new one, never half of
one. `file_sha256` is the digest every manifest, fingerprint and cache in tt records. tt_host.fsutil
and tt_stagekit.protocol use these; neither keeps a copy.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from pathlib import Path
from typing import BinaryIO, Iterator

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


def file_sha256(path: str | Path, chunk: int = CHUNK) -> str:
    """The sha256 hex digest of a file's bytes, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(chunk), b""):
            digest.update(block)
    return digest.hexdigest()
