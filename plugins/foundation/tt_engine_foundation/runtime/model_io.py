"""Saving and loading a finished model folder (HF-loadable weights + config + tokenizer) and its manifest."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Mapping

import torch
from safetensors.torch import load_file, save_file

from tt_stagekit import manifest
from tt_stagekit.contract import StageError
from tt_stagekit.files import REPLACE, atomic_write_json, publish_folder

from tt_engine_foundation.runtime.model import GPT, ModelConfig, hf_config

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
    publish_folder(tmp, target, REPLACE, sync_files=True)
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
    manifest.write_manifest(directory, kind, "foundation", extra=extra)
    return Path(directory) / manifest.MANIFEST
