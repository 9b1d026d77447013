"""Pretraining and SFT checkpoints: the one entry point the stages and training loops import.

A training loop makes a `Saver` and a `TrainerState`, then calls `choose` (which checkpoint to resume
from), `restore` (load it into every rank) and `save` (rank 0 writes, with every rank's RNG); a stage
names a run's checkpoint with `config_fingerprint` and `step_name`, and `list_steps` finds the
`step-*` folders. The rest (`verify`, `Staging`, `roll`, `remove_partial`, `load`, the RNG and `.pt` readers)
is here for the tests and benches that check those pieces. Code outside this package imports from
here, never a submodule:

- `writer`: the crash-safe save (staging buffers, background writer, atomic rename, rolling, backup)
  and reading a checkpoint back.
- `choice`: `verify` one checkpoint folder, `choose_resume` among them.
- `ranks`: `choose`, `restore`, `save` across the ranks of a torchrun world (one process: the plain calls).
"""

from tt_engine_foundation.runtime.checkpoints.choice import verify
from tt_engine_foundation.runtime.checkpoints.ranks import choose, restore, save
from tt_engine_foundation.runtime.checkpoints.writer import (
    Saver,
    Staging,
    TrainerState,
    config_fingerprint,
    list_steps,
    load,
    load_plain,
    read_trainer,
    remove_partial,
    rng_state,
    roll,
    set_rng_state,
    step_name,
)

__all__ = [
    "Saver", "Staging", "TrainerState", "choose", "config_fingerprint", "list_steps", "load", "load_plain",
    "read_trainer", "remove_partial", "restore", "rng_state", "roll", "save", "set_rng_state", "step_name", "verify",
]
