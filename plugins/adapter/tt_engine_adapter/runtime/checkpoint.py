"""Training checkpoints that make an interrupted LoRA run resumable bit-for-bit.

`<train>/checkpoints/step-<9 digits>/` holds the trainable (LoRA) weights as
safetensors, the optimizer state, the fp16 gradient scaler's state (`scaler.pt`,
when training uses one), the RNG states (every rank's, with the world
size, when training ran under torchrun) and `meta.json` (step,
stage fingerprint, loss series, tokens and time so far, file sha256s).
Written to a temp folder and renamed, rolled to `keep` newest.

`<train>/checkpoints/best/` (with hyperparameters.eval_interval_steps) holds the
PEFT adapter of the step with the lowest validation loss so far and
`best.json` (step, validation loss); the train stage registers that adapter.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Optional

from tt_engine_adapter.formats import fingerprint
from tt_engine_adapter.runtime.adapter_out import save_weights
from tt_stagekit.files import REPLACE, atomic_write_json, publish_folder
from tt_stagekit.protocol import InvalidInput, log

PREFIX = "step-"
BEST = "best"


def _dir_name(step: int) -> str:
    return f"{PREFIX}{step:09d}"


def rng_state() -> dict[str, Any]:
    import random

    import torch

    rng = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        rng["cuda"] = torch.cuda.get_rng_state_all()
    return rng


def save(root: Path, step: int, model: Any, optimizer: Any, meta: dict[str, Any], keep: int,
         rank_rng: Optional[list] = None, scaler: Any = None, weights: Optional[dict] = None,
         optimizer_state: Optional[dict] = None, sharded: bool = False) -> Path:
    """`weights` / `optimizer_state` (whole tensors, gathered from a sharded model: distributed_checkpoint.py)
    stand for `model`'s trainable parameters / `optimizer.state_dict()`; the files are the same either way, but
    for `sharded` in rng.pt (such a checkpoint resumes at another world size)."""
    import torch
    from safetensors.torch import save_file

    root.mkdir(parents=True, exist_ok=True)
    final = root / _dir_name(step)
    tmp = root / f".{_dir_name(step)}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    if weights is None:
        weights = {name: p.detach().to("cpu").contiguous() for name, p in model.named_parameters() if p.requires_grad}
    save_file(weights, str(tmp / "adapter.safetensors"))
    torch.save(optimizer.state_dict() if optimizer_state is None else optimizer_state, tmp / "optimizer.pt")
    rank_rng = rank_rng or [rng_state()]
    torch.save({**rank_rng[0], "ranks": rank_rng, "world_size": len(rank_rng), **({"sharded": True} if sharded else {})},
               tmp / "rng.pt")
    names = ["adapter.safetensors", "optimizer.pt", "rng.pt"]
    if scaler is not None:  # floats and ints: loads with weights_only=True
        torch.save(scaler.state_dict(), tmp / "scaler.pt")
        names.append("scaler.pt")
    files = {name: fingerprint.sha256_file(tmp / name) for name in names}
    for name in files:
        with open(tmp / name, "rb") as handle:
            os.fsync(handle.fileno())
    atomic_write_json(tmp / "meta.json", {**meta, "step": step, "files": files})
    publish_folder(tmp, final, REPLACE)
    for old in sorted(p for p in root.glob(f"{PREFIX}*") if p.is_dir())[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def save_best(root: Path, step: int, loss: float, model: Any, state_dict: Optional[dict] = None) -> Path:
    """The PEFT adapter of `model` as the best so far (lowest validation loss), replacing the previous best
    (`state_dict`: its LoRA tensors gathered whole, for a sharded model)."""
    root.mkdir(parents=True, exist_ok=True)
    final, tmp = root / BEST, root / f".{BEST}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    save_weights(model, tmp, state_dict)
    atomic_write_json(tmp / "best.json", {"step": step, "validation_loss": loss})
    publish_folder(tmp, final, REPLACE, sync_files=True)  # PEFT's save_pretrained does not fsync its files
    return final


def _intact(path: Path) -> Optional[dict[str, Any]]:
    try:
        meta = json.loads((path / "meta.json").read_text())
        for name, digest in meta["files"].items():
            if fingerprint.sha256_file(path / name) != digest:
                return None
        return meta
    except (OSError, ValueError, KeyError):
        return None


def latest(root: Path, stage_fingerprint: str) -> Optional[tuple[Path, dict[str, Any]]]:
    """Newest intact checkpoint; one made with other settings is refused."""
    if not root.is_dir():
        return None
    for path in sorted((p for p in root.glob(f"{PREFIX}*") if p.is_dir()), reverse=True):
        meta = _intact(path)
        if meta is None:
            log(f"checkpoint {path.name} is damaged; trying an older one", "warning")
            continue
        if meta.get("fingerprint") != stage_fingerprint:
            raise InvalidInput(
                f"{path}: this checkpoint was made with different settings or data; "
                "start a new run directory instead of resuming this one"
            )
        return path, meta
    return None


def saved_world_size(path: Path) -> int:
    import torch

    return int(load_plain(path / "rng.pt").get("world_size", 1))


def load_plain(path: Path) -> Any:
    """A `.pt` file holding tensors and plain data only (`weights_only=True`: loading never runs code from it)."""
    import pickle

    import torch

    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise InvalidInput(f"{path} holds more than tensors and plain data, so it is not loaded (loading it could "
                           f"run code): {str(exc).splitlines()[0]}; start a new run directory") from None


def set_rng(rng: dict[str, Any]) -> None:
    import random

    import torch

    torch.set_rng_state(rng["torch"])
    random.setstate(rng["python"])
    if "cuda" in rng and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])


def restore_scaler(path: Path, scaler: Any) -> None:
    """The gradient scaler's scale and growth tracker as saved; a checkpoint without one leaves it fresh."""
    if scaler is not None and (path / "scaler.pt").is_file():
        scaler.load_state_dict(load_plain(path / "scaler.pt"))


def restore(path: Path, model: Any, optimizer: Any, scaler: Any = None) -> None:
    import random

    import torch
    from safetensors.torch import load_file

    weights = load_file(str(path / "adapter.safetensors"))
    params = dict(model.named_parameters())
    missing = [name for name, p in params.items() if p.requires_grad and name not in weights]
    if missing:
        raise InvalidInput(f"{path}: checkpoint lacks {missing[0]}; start a new run directory")
    with torch.no_grad():
        for name, tensor in weights.items():
            params[name].copy_(tensor.to(params[name].device, params[name].dtype))
    optimizer.load_state_dict(load_plain(path / "optimizer.pt"))
    restore_scaler(path, scaler)
    rng = load_plain(path / "rng.pt")
    torch.set_rng_state(rng["torch"])
    random.setstate(rng["python"])
    if "cuda" in rng and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
