"""Fingerprints of local model folders and files (stdlib and tt_stagekit only; read by both sides).

A local base model is fingerprinted by every regular file's relative path,
size and sha256, so a changed base model changes stage fingerprints and is
recorded in the adapter's manifest. Shared by the host side (spec.py, plugin.py) and the runtime.

Hashing a multi-GB model folder at every `tt run` would be slow, so a file's
sha256 is cached (`$XDG_CACHE_HOME/tt/adapter-sha256-cache.json`) under its
absolute path, size, mtime (ns) and inode, like git's index: rewriting a
file changes its mtime and so its entry. As in git's "racy" rule, a file
modified less than two seconds before it is hashed is not cached (a rewrite
within the same timestamp tick could otherwise go unnoticed).
`TT_NO_HASH_CACHE=1` turns the cache off.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

from tt_stagekit.files import atomic_write_bytes, file_sha256 as sha256_file  # noqa: F401 (used as fingerprint.sha256_file)

CHUNK = 1 << 20
IGNORED_DIRS = {".git", ".cache", "__pycache__"}
RACY_NS = 2_000_000_000


def _cache_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tt" / "adapter-sha256-cache.json"


def _load_cache() -> dict:
    try:
        value = json.loads(_cache_path().read_text())
        return value if isinstance(value, dict) else {}
    except (OSError, ValueError):
        return {}


def _save_cache(cache: dict) -> None:
    path = _cache_path()
    try:
        atomic_write_bytes(path, json.dumps(cache).encode("utf-8"))
    except OSError:
        pass  # a cache that cannot be written only costs time


def folder_files(root: str | Path, use_cache: bool = False) -> list[dict]:
    """Every regular file under `root` (sorted POSIX relative paths) with size and sha256."""
    root = Path(root)
    use_cache = use_cache and os.environ.get("TT_NO_HASH_CACHE") != "1"
    cache = _load_cache() if use_cache else {}
    changed = False
    files = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if any(part in IGNORED_DIRS for part in rel.parts[:-1]) or not path.is_file():
            continue
        stat = path.stat()
        key = str(path.resolve())
        stamp = [stat.st_size, stat.st_mtime_ns, stat.st_ino]
        entry = cache.get(key)
        if use_cache and isinstance(entry, list) and entry[:3] == stamp:
            digest = entry[3]
        else:
            digest = sha256_file(path)
            if use_cache and time.time_ns() - stat.st_mtime_ns > RACY_NS:
                cache[key] = stamp + [digest]
                changed = True
        files.append({"path": rel.as_posix(), "size": stat.st_size, "sha256": digest})
    if changed:
        _save_cache(cache)
    return files


def folder_fingerprint(root: str | Path, use_cache: bool = True) -> str:
    """sha256 over the sorted (path, size, sha256) list of a folder (file hashes cached by default)."""
    payload = json.dumps(folder_files(root, use_cache), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def model_folder_problems(root: str | Path) -> list[str]:
    """What a usable Hugging Face causal-LM folder lacks (empty when complete)."""
    root = Path(root)
    problems = []
    if not (root / "config.json").is_file():
        problems.append("config.json is missing")
    weights = list(root.glob("*.safetensors")) + list(root.glob("pytorch_model*.bin"))
    if not weights:
        problems.append("no weights (*.safetensors or pytorch_model*.bin)")
    for index_name in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        index = root / index_name
        if index.is_file():
            try:
                shards = set(json.loads(index.read_text())["weight_map"].values())
            except (ValueError, KeyError, TypeError):
                problems.append(f"{index_name} is not a valid index")
                continue
            for shard in sorted(shards):
                if not (root / shard).is_file():
                    problems.append(f"weight shard {shard} is missing")
    if not ((root / "tokenizer.json").is_file() or (root / "tokenizer_config.json").is_file()):
        problems.append("no tokenizer (tokenizer.json / tokenizer_config.json)")
    return problems
