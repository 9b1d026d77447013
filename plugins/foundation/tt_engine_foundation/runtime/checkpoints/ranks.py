"""Checkpoints across ranks, for the stages that train (pretraining, SFT).

Rank 0 chooses the checkpoint and its refusal reaches every rank (`choose`);
rank 0 reads it and hands optimizer state and RNG to the others (`restore`;
weights reach them through DistributedDataParallel's start-up broadcast, so
restore before wrapping); every rank's RNG is gathered and rank 0 writes
(`save`). On one process these are the plain checkpoint calls.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional

from tt_stagekit import distributed
from tt_stagekit.protocol import log

from tt_engine_foundation.runtime.checkpoints.choice import ResumeChoice, choose_resume
from tt_engine_foundation.runtime.checkpoints.folder import (TrainerState, load, read_trainer, rng_state, set_rng_state,
                                                             step_name, trainer_state)
from tt_engine_foundation.runtime.checkpoints.writer import Saver, remove_partial


def choose(directory: Path, backup_dir: Optional[Path], fingerprint: str, config: Mapping[str, Any]) -> ResumeChoice:
    """The newest intact checkpoint with this fingerprint (see choice.choose_resume); notes are logged,
    then unfinished saves left by a killed process are deleted."""
    choice = distributed.on_main(lambda: choose_resume(directory, backup_dir, fingerprint, config), "checkpoint choice")
    for note in choice.notes:
        log(note, "warning")
    if distributed.context().is_main:
        for partial in remove_partial(directory) + remove_partial(backup_dir):
            log(f"removed {partial}: a checkpoint save that was cut short (the process was killed mid-write)")
    return choice


def restore(path: Path, model, optimizer, device) -> TrainerState:
    """Load a checkpoint into every rank. Each rank gets back its own RNG state when the world size is the
    one the checkpoint was written with; otherwise rank 0's (the training loops draw no random numbers that
    depend on the rank, so a changed world size continues the same global batches in the same order)."""
    ctx = distributed.context()
    payload = None
    if ctx.is_main:
        load(path, model, optimizer, device)
        trainer = read_trainer(path)
        payload = (distributed.on_cpu(optimizer.state_dict()) if ctx.enabled else None, trainer)
    payload = distributed.broadcast_object(payload, "checkpoint hand-over")
    optimizer_state, trainer = payload
    if not ctx.is_main:
        optimizer.load_state_dict(optimizer_state)
    rngs = trainer["rank_rng"]
    if int(trainer["world_size"]) == ctx.world_size:
        set_rng_state(rngs[ctx.rank])
    else:
        set_rng_state(rngs[0])
        if ctx.is_main:
            log(f"checkpoint written by {trainer['world_size']} process(es), resumed by {ctx.world_size}: "
                "same global batches and order; every rank starts from rank 0's RNG state")
    return trainer_state(trainer)


def save(saver: Saver, model, optimizer, state: TrainerState, config: Mapping[str, Any],
         fingerprint: str, reason: str) -> Path:
    """Checkpoint `state.step` for `reason` (folder.REASONS; every rank calls this; rank 0 writes, with every
    rank's RNG)."""
    ctx = distributed.context()
    rank_rng = distributed.gather_objects(rng_state(), "RNG gather for the checkpoint") if ctx.enabled else None
    if not ctx.is_main:
        return saver.directory / step_name(state.step)
    return saver.save(model, optimizer, state, config, fingerprint, rank_rng, reason)
