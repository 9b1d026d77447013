"""The training-loop skeleton every adapter tuning shares: SFT (runtime/train.py), preference
(runtime/preference/train.py) and reinforcement (runtime/reinforcement/train.py). Runs in the engine environment.

Contract. A loop builds its optimizer with `adamw` and hands it, the model and where its checkpoints go
(`Checkpoints`) to a `StepLoop`, then:

- `restore(resume, fresh)` puts the newest intact checkpoint of this stage fingerprint back (LoRA weights,
  optimizer, gradient scaler, every rank's RNG; a changed fingerprint is refused, exit 2, and so is a changed world
  size unless `any_world_size` and the run or the checkpoint is sharded: distributed_checkpoint.py) and
  returns (folder, meta) (None without one, after logging `no usable checkpoint; <fresh> from the start` when
  `fresh` is given);
- `run(state, step, meta)` calls `step()` until `state.step` reaches `total`: `step()` makes one optimizer step
  and advances `state.step` (it returns True to end training early: SFT's early stopping); every
  `Checkpoints.every` steps short of the end, and on a stop request before a step, `meta()` (the loop's own
  resumable state, JSON) is saved as a checkpoint; after a stop request `Interrupted` is raised (exit 130, the
  host resumes it later). Under torchrun a stop is agreed by every rank (`stopping`, set by the step's
  all-reduce), rank 0 writes the checkpoints with every rank's RNG.
- `set_lr(lr)` and `apply_gradients(max_grad_norm)` (unscale, clip, optimizer and scaler step, zero grads) are
  the optimizer's step as every loop makes it.

What stays in each loop: its schedule, its loss, its state and the order of its checkpoint's meta keys (the
checkpoint bytes of a run are pinned by the resume tests).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Protocol

from tt_engine_adapter.runtime import checkpoint, distributed_checkpoint, sharding
from tt_stagekit import distributed
from tt_stagekit.protocol import STOP, InvalidInput, Interrupted, log

BETAS = (0.9, 0.999)
EPS = 1e-8


def trainable(model: Any) -> list:
    """The parameters the optimizer updates (the LoRA tensors)."""
    return [p for p in model.parameters() if p.requires_grad]


def adamw(params: Any, lr: float, weight_decay: Optional[float] = None) -> Any:
    """torch's AdamW with the betas and eps every loop uses; `params` a list of tensors or of param groups.
    `weight_decay` None leaves torch's default to groups that set their own (SFT's decay / no-decay split)."""
    import torch

    extra = {} if weight_decay is None else {"weight_decay": weight_decay}
    return torch.optim.AdamW(params, lr=lr, betas=BETAS, eps=EPS, **extra)


@dataclass(frozen=True)
class Checkpoints:
    """Where and how often a loop checkpoints: `folder` (`<stage>/checkpoints`), the stage `fingerprint` a
    checkpoint must carry to be resumed, a checkpoint every `every` steps, the `keep` newest kept."""

    folder: Path
    fingerprint: str
    every: int
    keep: int


class Stepped(Protocol):
    step: int


class StepLoop:
    """The optimizer steps of one tuning stage: restore, step, save, stop (the module docstring's contract)."""

    def __init__(self, model: Any, optimizer: Any, checkpoints: Checkpoints, total: int, scaler: Any = None,
                 any_world_size: bool = False):
        self.model, self.optimizer, self.checkpoints, self.total, self.scaler = (model, optimizer, checkpoints,
                                                                                 total, scaler)
        self.any_world_size = any_world_size  # resumable at another world size (distributed_checkpoint.py)
        self.params = trainable(model)
        self.stopping = False  # distributed: agreed by every rank at the end of the previous step

    def restore(self, resume: bool, fresh: Optional[str] = None) -> Optional[tuple[Path, dict]]:
        """(folder, meta) of the newest usable checkpoint after restoring it (None: none, or `resume` false)."""
        if not resume:
            return None
        found = distributed.on_main(lambda: checkpoint.latest(self.checkpoints.folder, self.checkpoints.fingerprint),
                                    "checkpoint choice")
        if not found:
            if fresh is not None:
                log(f"no usable checkpoint; {fresh} from the start", "warning")
            return None
        if sharding.is_sharded(self.model):
            distributed_checkpoint.restore(found[0], self.model, self.optimizer, self.scaler, self.any_world_size)
        else:
            _restore_everywhere(found[0], self.model, self.optimizer, self.scaler, self.any_world_size)
        return found

    def save(self, step: int, meta: dict) -> None:
        """A checkpoint of step `step` with `meta` (rank 0 writes it, with every rank's RNG)."""
        if sharding.is_sharded(self.model):  # every rank gathers its shard; rank 0 writes
            return distributed_checkpoint.save(self.checkpoints, step, self.model, self.optimizer, meta, self.scaler)
        ctx = distributed.context()
        rank_rng = (distributed.gather_objects(checkpoint.rng_state(), "RNG gather for the checkpoint")
                    if ctx.enabled else None)
        if ctx.is_main:
            checkpoint.save(self.checkpoints.folder, step, self.model, self.optimizer, meta, self.checkpoints.keep,
                            rank_rng, self.scaler)

    def stop_requested(self) -> bool:
        return self.stopping or (not distributed.context().enabled and STOP.requested)

    def set_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def apply_gradients(self, max_grad_norm: Optional[float]) -> None:
        """One optimizer step on the accumulated gradients, clipped to `max_grad_norm` (None or 0: unclipped)."""
        import torch

        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)  # clip the true gradients; a step with inf/nan is skipped
        if max_grad_norm:
            torch.nn.utils.clip_grad_norm_(self.params, max_grad_norm)
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def run(self, state: Stepped, step: Callable[[], Optional[bool]], meta: Callable[[], dict]) -> None:
        """`step()` until `state.step` reaches `total` (or `step()` returns True); checkpoints and stops."""
        while state.step < self.total:
            if self.stop_requested():
                self.save(state.step, meta())
                raise Interrupted(f"{STOP.signal_name or 'SIGTERM'}: checkpoint saved at step "
                                  f"{state.step}/{self.total}; resume to continue")
            if step():
                break
            if state.step % self.checkpoints.every == 0 and state.step < self.total:
                self.save(state.step, meta())


def _restore_everywhere(path: Path, model: Any, optimizer: Any, scaler: Any = None,
                        any_world_size: bool = False) -> None:
    """Rank 0 reads the checkpoint; optimizer and scaler state and each rank's RNG reach the others by broadcast
    (the LoRA weights through DDP's start-up broadcast). A changed world size is refused unless `any_world_size`
    and the checkpoint was written by sharded ranks (distributed_checkpoint.world_size_refusal)."""
    ctx = distributed.context()
    payload = None
    if ctx.is_main:
        refusal = distributed_checkpoint.world_size_refusal(path, checkpoint.saved_world_size(path), ctx.world_size,
                                                            any_world_size, distributed_checkpoint.written_sharded(path))
        if refusal:
            payload = ("refused", refusal)
        else:
            checkpoint.restore(path, model, optimizer, scaler)
            if ctx.enabled:
                rng = checkpoint.load_plain(path / "rng.pt")
                scaled = scaler.state_dict() if scaler is not None else None
                payload = ("ok", distributed.on_cpu(optimizer.state_dict()), rng["ranks"], scaled)
            else:
                payload = ("ok", None, None, None)
    payload = distributed.broadcast_object(payload, "checkpoint hand-over")
    if payload[0] == "refused":
        raise InvalidInput(payload[1])
    if ctx.enabled:
        if not ctx.is_main:
            optimizer.load_state_dict(payload[1])
            if scaler is not None and payload[3]:
                scaler.load_state_dict(payload[3])
        checkpoint.set_rng(distributed_checkpoint.rank_rng(payload[2], ctx.rank))
