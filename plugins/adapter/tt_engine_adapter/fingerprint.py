"""Fingerprints of local model folders and files (standard library only).

A local base model is fingerprinted by every regular file's relative path,
size and sha256, so a changed base model changes stage fingerprints and is
recorded in the adapter's manifest. Shared by the plugin and the runtime.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

CHUNK = 1 << 20
IGNORED_DIRS = {".git", ".cache", "__pycache__"}


def sha256_file(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def folder_files(root: str | Path) -> list[dict]:
    """Every regular file under `root` (sorted POSIX relative paths) with size and sha256."""
    root = Path(root)
    files = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if any(part in IGNORED_DIRS for part in rel.parts[:-1]) or not path.is_file():
            continue
        files.append({"path": rel.as_posix(), "size": path.stat().st_size, "sha256": sha256_file(path)})
    return files


def folder_fingerprint(root: str | Path) -> str:
    """sha256 over the sorted (path, size, sha256) list of a folder."""
    payload = json.dumps(folder_files(root), sort_keys=True, separators=(",", ":"))
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
