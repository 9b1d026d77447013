"""Saving and loading a finished model folder (HF-loadable weights + config + tokenizer) and its manifest."""

from __future__ import annotations

import datetime
import json
import os
import shutil
from pathlib import Path
from typing import Any, Mapping

import torch
from safetensors.torch import load_file, save_file

from tt_stagekit.protocol import StageError, atomic_write_json, file_sha256, fsync_dir

from tt_engine_foundation.runtime.model import GPT, ModelConfig, hf_config

MANIFEST = "artifact-manifest.json"


def save_model_dir(target: Path, model: GPT, tokenizer_json: Path, kind: str, extra: Mapping[str, Any]) -> Path:
    """Write model.safetensors, config.json (transformers LlamaConfig), tt-model.json, tokenizer.json.

    Built beside the target and renamed into place; an older folder is replaced.
    """
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True, mode=0o700)
    weights = {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in model.state_dict().items()}
    save_file(weights, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    atomic_write_json(tmp / "config.json", hf_config(model.cfg))
    atomic_write_json(tmp / "tt-model.json", {"format": 1, "model": model.cfg.to_dict(), **extra})
    shutil.copyfile(tokenizer_json, tmp / "tokenizer.json")
    manifest_extra = {"system_message_sha256": extra.get("system_message_sha256", "")}
    write_manifest(tmp, kind, manifest_extra)
    for path in tmp.iterdir():
        with open(path, "rb") as handle:
            os.fsync(handle.fileno())
    fsync_dir(tmp)
    if target.exists():
        old = target.with_name(f".{target.name}.{os.getpid()}.old")
        os.replace(target, old)
        os.replace(tmp, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, target)
    fsync_dir(target.parent)
    return target


def load_model_dir(source: Path, device) -> GPT:
    meta_path = source / "tt-model.json"
    if not meta_path.is_file():
        raise StageError(f"{source}: not a foundation model folder (no tt-model.json)")
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    model = GPT(ModelConfig(**meta["model"]))
    model.load_state_dict(load_file(str(source / "model.safetensors")), strict=True)
    return model.to(device)


def write_manifest(directory: str | Path, kind: str, extra: Mapping[str, Any]) -> Path:
    """Write artifact-manifest.json listing every file (size, sha256) in directory (docs/protocol.md)."""
    directory = Path(directory)
    files = []
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        rel = path.relative_to(directory).as_posix()
        if rel != MANIFEST:
            files.append({"path": rel, "size": path.stat().st_size, "sha256": file_sha256(path)})
    manifest = {
        "format": 1,
        "kind": kind,
        "engine": "foundation",
        "files": files,
        "created": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        **extra,
    }
    target = directory / MANIFEST
    atomic_write_json(target, manifest)
    return target
