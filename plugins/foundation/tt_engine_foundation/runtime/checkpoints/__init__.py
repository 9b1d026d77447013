"""Pretraining and SFT checkpoints: the one entry point the stages and training loops import.

A training loop makes a `Saver` and a `TrainerState`, then calls `choose` (which checkpoint to resume
from), `restore` (load it into every rank) and `save` (rank 0 writes, with every rank's RNG); a stage
names a run's checkpoint with `config_fingerprint` and `step_name`, `list_steps` finds the `step-*`
folders and `kept_line` names them, each with its `reason` (one of `REASONS`), for the stage's report. The rest
(`verify`, `Staging`, `roll`, `remove_partial`, `load`, the RNG and `.pt` readers) is here for the tests and
benches that check those pieces. Code outside this package imports from here, never a submodule:

- `folder`: what a `step-*` folder holds (file names, `TrainerState`, RNG states, the fingerprint) and
  reading one back (`load`, `load_plain`: tensors and plain data only).
- `writer`: the crash-safe save (staging buffers, background writer, atomic rename, rolling, backup).
- `choice`: `verify` one checkpoint folder, `choose_resume` among them.
- `ranks`: `choose`, `restore`, `save` across the ranks of a torchrun world (one process: the plain calls).
"""

from tt_engine_foundation.runtime.checkpoints.choice import verify
from tt_engine_foundation.runtime.checkpoints.folder import (
    REASONS,
    TrainerState,
    config_fingerprint,
    kept_line,
    list_steps,
    load,
    load_plain,
    read_trainer,
    rng_state,
    set_rng_state,
    step_name,
)
from tt_engine_foundation.runtime.checkpoints.ranks import choose, restore, save
from tt_engine_foundation.runtime.checkpoints.writer import Saver, Staging, remove_partial, roll

__all__ = [
    "REASONS", "Saver", "Staging", "TrainerState", "choose", "config_fingerprint", "kept_line", "list_steps", "load", "load_plain",
    "read_trainer", "remove_partial", "restore", "rng_state", "roll", "save", "set_rng_state", "step_name", "verify",
]
