"""Which files a corpus path holds: the shard types and the sorted, link-free listing of a file or folder.

Stdlib and tt_stagekit only, read by both sides: the host validates and
fingerprints a corpus with it (spec.py, plugin.py, doctor.py), the stages read
the same shards (runtime/corpus.py), so both agree on what the corpus is.
Suffixes match case-insensitively (`.TXT` is a text shard); symbolic links,
FIFOs and devices are refused.
"""

from __future__ import annotations

import os
from pathlib import Path

from tt_stagekit.protocol import InvalidInput
from tt_stagekit.userinput import special_kind

SHARD_SUFFIXES = (".txt", ".jsonl", ".parquet")


def is_shard(path: Path) -> bool:
    return path.suffix.lower() in SHARD_SUFFIXES


def list_shards(path: str | Path) -> list[Path]:
    """The corpus files under path (a file or a folder), sorted; refuses links and empty folders."""
    path = Path(path)
    if path.is_symlink():
        raise InvalidInput(f"{path}: symbolic links are refused; point at the real file")
    if not path.exists():
        raise InvalidInput(f"{path}: no such file or folder")
    if not path.is_dir():
        kind = special_kind(path.stat().st_mode)
        if kind is not None:
            raise InvalidInput(f"{path} is {kind}, not a regular file or a folder")
        if not is_shard(path):
            raise InvalidInput(f"{path}: unsupported corpus file type (use {', '.join(SHARD_SUFFIXES)})")
        return [path]
    shards: list[Path] = []
    for root, dirs, files in os.walk(path, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in dirs:
            if (Path(root) / name).is_symlink():
                raise InvalidInput(f"{Path(root) / name}: symbolic links are refused inside a corpus folder")
        for name in sorted(files):
            if name.startswith("."):
                continue
            full = Path(root) / name
            if not is_shard(full):
                continue
            if full.is_symlink():
                raise InvalidInput(f"{full}: symbolic links are refused inside a corpus folder")
            kind = special_kind(full.lstat().st_mode)
            if kind is not None:  # a FIFO or device would block or never end when read
                raise InvalidInput(f"{full} is {kind}, not a regular file; remove it from the corpus folder")
            shards.append(full)
    shards.sort(key=lambda p: p.relative_to(path).as_posix())
    if not shards:
        raise InvalidInput(f"{path}: folder holds no corpus shards ({', '.join(SHARD_SUFFIXES)})")
    return shards
