"""What a pretraining or SFT checkpoint folder holds, and reading one back.

A checkpoint is a folder `step-<9 digits>/` holding `model.safetensors`,
`optimizer.pt` (the optimizer's state: Muon and AdamW, or AdamW), `trainer-state.pt` (scheduler, CPU/CUDA/numpy
RNG of every rank, the world size, counters; tensors and plain data only, read
back with `weights_only=True`) and `metadata.json` (format 2: step, samples consumed, tokens seen, last
loss, the config and its fingerprint, every file's size and sha256, `reason` (one of REASONS: why the step
was saved) and, its last key, `complete: true`; format 1, written before tt recorded the last two, lacks them).
writer.py writes these folders; choice.verify checks them and chooses which one a run resumes from.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional

import torch
from safetensors.torch import load as st_load

from tt_stagekit.contract import InvalidInput

STEP_RE = re.compile(r"^step-(\d{9})\Z")
FILES = ("model.safetensors", "optimizer.pt", "trainer-state.pt")
FORMAT = 2  # metadata.json's format: 2 records `reason` and `complete`; 1 (older tt) neither
# Why a step was saved: every checkpoint_interval_steps, every checkpoint_interval_seconds, on a stop signal, at
# the stage's last step. (No training loop saves before an evaluation today; a reason is added here when one does.)
REASONS = ("interval", "time", "signal", "stage_end")


def step_name(step: int) -> str:
    return f"step-{step:09d}"


def config_fingerprint(config: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def rng_state() -> dict[str, Any]:
    """Every RNG's state as tensors and plain data only (numpy's key array as a list of ints), so the
    checkpoint loads with `torch.load(weights_only=True)`, which never runs code from the file."""
    import numpy as np
    import random

    name, keys, position, has_gauss, cached = np.random.get_state()
    state: dict[str, Any] = {"cpu": torch.get_rng_state(),
                             "numpy": [str(name), [int(k) for k in keys], int(position), int(has_gauss),
                                       float(cached)],
                             "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    import numpy as np
    import random

    torch.set_rng_state(state["cpu"])
    name, keys, position, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), position, has_gauss, cached))
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


@dataclass
class TrainerState:
    step: int = 0
    samples_consumed: int = 0
    tokens_seen: int = 0
    last_loss: Optional[float] = None
    elapsed_seconds: float = 0.0
    scheduler: dict[str, Any] = field(default_factory=dict)


def list_steps(directory: Optional[Path]) -> list[tuple[int, Path]]:
    if directory is None or not directory.is_dir():
        return []
    found = []
    for path in directory.iterdir():
        match = STEP_RE.match(path.name)
        if match and path.is_dir() and not path.is_symlink():
            found.append((int(match.group(1)), path))
    return sorted(found, reverse=True)


def kept_line(directory: Optional[Path]) -> str:
    """The checkpoints a folder keeps, newest first, each with why it was saved: a line for the stage's report
    (`tt runs report`). A step whose metadata cannot be read, or predates `reason`, says so."""
    described = []
    for _, path in list_steps(directory):
        try:
            metadata = json.loads((path / "metadata.json").read_text(encoding="utf-8"))
            reason = metadata.get("reason") or "reason not recorded (an older tt)"
        except (OSError, ValueError, AttributeError):
            reason = "metadata.json unreadable"
        described.append(f"{path.name} ({reason})")
    return f"checkpoints kept in {directory}: " + (", ".join(described) or "none")


def load_plain(path: Path, map_location: Any = "cpu") -> Any:
    """A `.pt` file holding tensors and plain data only (`weights_only=True`: loading never runs code from it,
    which matters for checkpoints read back from a shared `checkpoint_backup_dir`)."""
    import pickle

    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        raise InvalidInput(
            f"{path} holds more than tensors and plain data, so it is not loaded (loading it could run code): "
            f"{str(exc).splitlines()[0]}. A checkpoint written before tt stored RNG states as plain data cannot be "
            "resumed; start a new run directory"
        ) from None


def read_trainer(path: Path) -> dict[str, Any]:
    """trainer-state.pt: scheduler, counters, `rng` (rank 0), `rank_rng` (every rank), `world_size`."""
    trainer = load_plain(path / "trainer-state.pt")
    trainer.setdefault("rank_rng", [trainer["rng"]])
    trainer.setdefault("world_size", len(trainer["rank_rng"]))
    return trainer


def trainer_state(trainer: Mapping[str, Any]) -> TrainerState:
    counters = trainer["counters"]
    return TrainerState(
        step=counters["step"],
        samples_consumed=counters["samples_consumed"],
        tokens_seen=counters["tokens_seen"],
        last_loss=counters["last_loss"],
        elapsed_seconds=counters.get("elapsed_seconds", 0.0),
        scheduler=trainer["scheduler"],
    )


def load(path: Path, model: torch.nn.Module, optimizer: Optional[torch.optim.Optimizer], device) -> TrainerState:
    weights = st_load((path / "model.safetensors").read_bytes())
    model.load_state_dict({k: v.to(device) for k, v in weights.items()}, strict=True)
    if optimizer is not None:
        optimizer.load_state_dict(load_plain(path / "optimizer.pt", map_location=device))
    trainer = read_trainer(path)
    set_rng_state(trainer["rng"])
    return trainer_state(trainer)
