"""Writing pretraining and SFT checkpoints crash-safely (what a checkpoint folder holds: folder.py).

A checkpoint is built in a hidden temporary folder and renamed into place, so a
folder named `step-*` is complete unless the disk lies; choice.verify
checks the sizes and hashes anyway, and chooses which one a run resumes from. Old checkpoints are rolled to `keep`; a copy goes to
the backup folder when one is set. Resume never deletes anything: a damaged
folder that would be overwritten is moved aside.

Saving blocks training only for a copy of the state into CPU staging buffers
that are allocated once and reused (a memcpy, no page faults, no disk);
serialisation, hashing, fsync, the rename, backup and rolling run in a
background thread. The price is one checkpoint's worth of resident CPU memory.

A test gate: while the file named by `TT_TEST_CHECKPOINT_GATE` exists, the
background writer holds after writing the files and before hashing, fsync and
the rename (mid-write), with `<gate>.held` present while it holds; tests use it
to make "a stop lands while a checkpoint is being written" a certain state.
"""

from __future__ import annotations

import copy
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any, Mapping, Optional

import torch
from safetensors.torch import save_file

from tt_stagekit.files import KEEP, atomic_write_json, file_sha256, publish_folder

from tt_engine_foundation.runtime.checkpoints.folder import (FILES, FORMAT, REASONS, TrainerState, list_steps,
                                                             rng_state, step_name)

class Staging:
    """CPU copies of a checkpoint's tensors in buffers allocated on first use and reused.

    Keys are a tensor's place in the state (`("model", name)`, `("optimizer", "state", 3,
    "exp_avg")`); a buffer is replaced only when the shape or dtype at that place changes.
    """

    def __init__(self) -> None:
        self._buffers: dict[tuple, torch.Tensor] = {}

    def copy(self, key: tuple, tensor: torch.Tensor) -> torch.Tensor:
        buffer = self._buffers.get(key)
        if buffer is None or buffer.shape != tensor.shape or buffer.dtype != tensor.dtype:
            buffer = torch.empty(tensor.shape, dtype=tensor.dtype, device="cpu")
            self._buffers[key] = buffer
        buffer.copy_(tensor.detach())
        return buffer

    def tree(self, key: tuple, value: Any) -> Any:
        """The same nested dict/list/tuple with every tensor replaced by its staged copy."""
        if isinstance(value, torch.Tensor):
            return self.copy(key, value)
        if isinstance(value, dict):
            return {k: self.tree((*key, k), v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(self.tree((*key, i), v) for i, v in enumerate(value))
        return value

    def snapshot(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> tuple[dict, dict]:
        weights = {k: self.copy(("model", k), v) for k, v in model.state_dict().items()}
        return weights, self.tree(("optimizer",), optimizer.state_dict())


class Saver:
    """Writes checkpoints. `save` copies the state into reused CPU staging buffers and
    returns; serialisation, hashing, fsync, the atomic rename, backup and rolling finish in a
    background thread while training goes on.

    At most one checkpoint is being finished at a time (the next `save` waits for it, so the
    staging buffers are never overwritten while being written); `wait()` joins it and
    re-raises its error. Older checkpoints are rolled only after the new one is durable, so a
    power cut always leaves at least one complete checkpoint behind.
    """

    def __init__(self, directory: Path, keep: int, backup_dir: Optional[Path] = None):
        self.directory, self.keep, self.backup_dir = directory, keep, backup_dir
        self._thread: Optional[threading.Thread] = None
        self._error: Optional[BaseException] = None
        self._staging = Staging()

    def save(self, model, optimizer, state: "TrainerState", config: Mapping[str, Any], fingerprint: str,
             rank_rng: Optional[list] = None, reason: str = "interval") -> Path:
        """Checkpoint `state.step`; `reason` (one of folder.REASONS) is recorded in its metadata."""
        if reason not in REASONS:
            raise ValueError(f"checkpoint reason {reason!r} is not one of {', '.join(REASONS)}")
        self.wait()
        weights, optimizer_state = self._staging.snapshot(model, optimizer)
        trainer = _trainer_record(state, rank_rng or [rng_state()])
        final = self.directory / step_name(state.step)
        args = (weights, optimizer_state, trainer, final, dict(config), fingerprint, reason)
        self._thread = threading.Thread(target=self._finish_safely, args=args, daemon=False)
        self._thread.start()
        return final

    def _finish_safely(self, *args) -> None:
        try:
            self._finish(*args)
        except BaseException as exc:  # surfaced by wait()
            self._error = exc

    def _finish(self, weights: dict, optimizer_state: dict, trainer: dict, final: Path, config: dict,
                fingerprint: str, reason: str) -> None:
        tmp = _write_raw(self.directory, final.name, weights, optimizer_state, trainer)
        _hold_at_test_gate()
        _finalize(tmp, final, trainer["counters"], config, fingerprint, reason)
        roll(self.directory, self.keep)
        if self.backup_dir is not None:
            backup(final, self.backup_dir)
            roll(self.backup_dir, self.keep)

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            error, self._error = self._error, None
            raise error


def _hold_at_test_gate() -> None:
    """Hold while the test gate file exists (see the module docstring); nothing without TT_TEST_CHECKPOINT_GATE."""
    gate = os.environ.get("TT_TEST_CHECKPOINT_GATE")
    if not gate or not os.path.exists(gate):
        return
    held = Path(f"{gate}.held")
    held.write_text(f"{os.getpid()}\n")
    try:
        while os.path.exists(gate):
            time.sleep(0.01)
    finally:
        held.unlink(missing_ok=True)


def _trainer_record(state: TrainerState, rank_rng: list) -> dict[str, Any]:
    """trainer-state.pt's content. rank_rng: every rank's RNG state in rank order; rank 0's is also `rng`."""
    return {"scheduler": copy.deepcopy(state.scheduler), "rng": rank_rng[0], "rank_rng": rank_rng,
            "world_size": len(rank_rng), "counters": _counters(state)}


def _write_raw(directory: Path, name: str, weights: dict, optimizer_state: dict, trainer: dict) -> Path:
    """Serialise weights, optimizer and trainer state into a hidden temporary folder."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = directory / f".tmp-{name}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(mode=0o700)
    save_file(weights, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    torch.save(optimizer_state, tmp / "optimizer.pt")
    torch.save(trainer, tmp / "trainer-state.pt")
    return tmp


def _hash_file(path: Path) -> dict[str, Any]:
    digest = file_sha256(path, 1 << 22)
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())
    os.chmod(path, 0o600)
    return {"path": path.name, "size": path.stat().st_size, "sha256": digest}


def _finalize(tmp: Path, final: Path, counters: dict, config: dict, fingerprint: str, reason: str) -> None:
    """Hash and fsync every file, write metadata.json (`complete: true` its last key, written once every file is
    durable), rename the folder into place."""
    files = [_hash_file(tmp / name) for name in FILES]
    metadata = {
        "format": FORMAT,
        **counters,
        "config": config,
        "config_fingerprint": fingerprint,
        "files": files,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "reason": reason,
        "complete": True,
    }
    atomic_write_json(tmp / "metadata.json", metadata)
    publish_folder(tmp, final, KEEP)


def _counters(state: TrainerState) -> dict[str, Any]:
    return {
        "step": state.step,
        "samples_consumed": state.samples_consumed,
        "tokens_seen": state.tokens_seen,
        "last_loss": state.last_loss,
        "elapsed_seconds": state.elapsed_seconds,
    }


def backup(source: Path, backup_root: Path) -> Path:
    """Copy a finished checkpoint folder into backup_root atomically."""
    backup_root.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = backup_root / f".tmp-{source.name}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    shutil.copytree(source, tmp)
    final = backup_root / source.name
    publish_folder(tmp, final, KEEP, sync_files=True)
    return final


def remove_partial(directory: Optional[Path]) -> list[Path]:
    """Delete `.tmp-step-*` folders: saves that a killed process never finished (never a checkpoint
    anyone could resume from; runs are locked, so no other process is writing them)."""
    if directory is None or not directory.is_dir():
        return []
    removed = []
    for path in sorted(directory.glob(".tmp-step-*")):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def roll(directory: Path, keep: int) -> list[Path]:
    """Delete all but the newest `keep` intact-named checkpoints; returns what was removed."""
    removed = []
    for _, path in list_steps(directory)[keep:]:
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed
