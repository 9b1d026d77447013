"""The SFT loop (stage `train`): LoRA training, seeded, AdamW with warmup + decay, gradient accumulation,
token-level loss normalization across the accumulated batch; checkpoints, resume and stop by the skeleton
every tuning shares (runtime/loop.py). Runs in the engine environment.

The whole step schedule (which rows form each micro-batch of each optimizer
step) is computed up front from the seed, so a run resumed at step k sees
exactly the batches an uninterrupted run would.

Under torchrun (DistributedDataParallel, runtime/distributed.py) every rank
follows the same schedule and computes rows `rank::world_size` of each
micro-batch; ranks agree on the reported loss and on stopping in one
all-reduce per step, rank 0 writes the checkpoints (with every rank's RNG),
and a checkpoint resumes only with the world size that wrote it (LoRA dropout
draws per-rank random numbers) unless lora_dropout is 0. With hyperparameters.sharding "fsdp" the model
arrives sharded (runtime/sharding.py) and is its own wrapper.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from tt_engine_adapter.runtime import batches, loop, sharding
from tt_stagekit import distributed
from tt_engine_adapter.runtime.chat import IGNORE_INDEX, Encoded
from tt_engine_adapter.runtime.config import AdapterSettings
from tt_engine_adapter.runtime.logits import token_loss_sum
from tt_engine_adapter.runtime.prefix import Sharing
from tt_stagekit.protocol import STOP, log


def build_schedule(n_rows: int, batch_size: int, accumulation: int, n_epochs: int, seed: int,
                   max_steps: Optional[int] = None) -> list[list[list[int]]]:
    """Optimizer steps -> micro-batches -> row indices; each epoch is a seeded shuffle."""
    steps: list[list[list[int]]] = []
    for epoch in range(n_epochs):
        order = list(range(n_rows))
        random.Random(seed * 1_000_003 + epoch).shuffle(order)
        micro = [order[i:i + batch_size] for i in range(0, n_rows, batch_size)]
        steps.extend(micro[j:j + accumulation] for j in range(0, len(micro), accumulation))
    return steps[:max_steps] if max_steps else steps


def lr_at(step: int, total: int, base_lr: float, warmup_ratio: float, kind: str) -> float:
    """Learning rate for 0-based optimizer step `step`: linear warmup, then cosine/linear/constant decay."""
    warmup = math.ceil(warmup_ratio * total)
    if step < warmup:
        return base_lr * (step + 1) / warmup
    if kind == "constant":
        return base_lr
    progress_ = (step - warmup) / max(1, total - warmup)
    if kind == "linear":
        return base_lr * max(0.0, 1.0 - progress_)
    return base_lr * 0.5 * (1.0 + math.cos(math.pi * progress_))


def supervised_targets(rows: Sequence[Encoded]) -> int:
    """Tokens that carry loss after the causal shift (a label at position 0 has no context)."""
    return sum(sum(1 for label in r.labels[1:] if label != IGNORE_INDEX) for r in rows)


@dataclass
class TrainState:
    step: int = 0
    tokens: int = 0
    seconds: float = 0.0
    losses: list = None  # [[step, loss], ...]
    padding: dict = None  # padding(...) of the whole schedule (not checkpointed: recomputed)
    validation: list = None  # [[step, validation loss], ...] (eval_interval_steps)
    best_step: Optional[int] = None  # the step with the lowest validation loss so far
    best_loss: Optional[float] = None
    stale: int = 0  # evaluations since the best one (early_stopping_patience)
    stopped_early: bool = False
    held_bytes: Optional[int] = None  # parameter + optimizer bytes per rank (runtime/sharding.py; not checkpointed)

    def __post_init__(self) -> None:
        if self.losses is None:
            self.losses = []
        if self.validation is None:
            self.validation = []

    def evaluation_meta(self) -> dict:
        return {"validation": self.validation, "best_step": self.best_step, "best_loss": self.best_loss,
                "stale": self.stale}


@dataclass
class Evaluation:
    """Validation during training: `measure()` is the validation loss now; `on_best(step, loss)` keeps the
    weights (called on every rank after an evaluation that lowered the validation loss)."""

    measure: Callable[[], float]
    on_best: Callable[[int, float], Any]


def wrap_lora(model: Any, hp: AdapterSettings):
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=hp.lora_rank,
        lora_alpha=hp.lora_alpha,
        lora_dropout=hp.lora_dropout,
        target_modules=hp.target_modules,
        bias="none",
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, config)


def train(
    model: Any,
    rows: Sequence[Encoded],
    hp: AdapterSettings,
    *,
    pad_id: int,
    device: str,
    autocast_dtype: Any,
    checkpoint_dir: Path,
    stage_fingerprint: str,
    resume: bool,
    on_step: Optional[Callable[[int, int, float, float, float], None]] = None,
    evaluation: Optional[Evaluation] = None,
    scaler: Any = None,
) -> TrainState:
    """Train the PEFT `model` in place; returns the final state. Raises Interrupted after a checkpoint on SIGTERM.

    `evaluation` (with hp.eval_interval_steps): the validation loss every N steps and at the end; training stops
    after hp.early_stopping_patience evaluations without a new best. `scaler`: a torch GradScaler (fp16).
    """
    import torch

    random.seed(hp.seed)
    torch.manual_seed(hp.seed)
    schedule = build_schedule(len(rows), hp.batch_size, hp.gradient_accumulation_steps, hp.n_epochs,
                              hp.seed, hp.max_steps)
    total = len(schedule)
    params = loop.trainable(model)
    decay = [p for p in params if p.ndim >= 2]
    no_decay = [p for p in params if p.ndim < 2]
    optimizer = loop.adamw([{"params": decay, "weight_decay": hp.weight_decay},
                            {"params": no_decay, "weight_decay": 0.0}], hp.learning_rate)
    steps = loop.StepLoop(model, optimizer, loop.Checkpoints(checkpoint_dir, stage_fingerprint,
                                                             hp.checkpoint_interval_steps, hp.keep_checkpoints),
                          total, scaler, any_world_size=hp.lora_dropout == 0)
    state = TrainState()
    found = steps.restore(resume, fresh="training")
    if found:
        path, meta = found
        state = TrainState(step=meta["step"], tokens=meta["tokens"], seconds=meta["seconds"], losses=meta["losses"],
                           **meta.get("evaluation", {}))
        log(f"resumed from {path.name} at step {state.step}/{total}")
    state.padding = padding(rows, schedule, hp.packing, hp.max_seq_length)
    net = sharding.wrap(model, device)
    ctx = distributed.context()
    sharing = Sharing.decide(model, hp.packing, hp.gradient_checkpointing, ctx.enabled)
    log(sharing.reason)

    def meta() -> dict:
        return {"fingerprint": stage_fingerprint, "tokens": state.tokens, "seconds": state.seconds,
                "losses": state.losses, "total_steps": total, "evaluation": state.evaluation_meta()}

    def step() -> bool:
        started = time.perf_counter()
        lr = lr_at(state.step, total, hp.learning_rate, hp.warmup_ratio, hp.lr_scheduler)
        steps.set_lr(lr)
        micro_batches = [[rows[i] for i in micro] for micro in schedule[state.step]]
        targets = sum(supervised_targets(b) for b in micro_batches)
        step_loss = torch.zeros((), device=device)  # summed on device: one host sync per optimizer step
        step_tokens = 0
        for index, batch in enumerate(micro_batches):
            mine = batch[ctx.rank::ctx.world_size] if ctx.enabled else batch
            inputs = batches.collate(mine or batch[:1], pad_id, hp.packing, hp.max_seq_length).inputs
            if not mine:  # more ranks than rows in this micro-batch: a zero-weight row keeps DDP in step
                inputs["labels"].fill_(IGNORE_INDEX)
            inputs = {k: v.to(device) for k, v in inputs.items()}
            with sharding.no_sync(net, index < len(micro_batches) - 1), distributed.collective("gradient all-reduce"):
                with torch.autocast(device_type=device, dtype=autocast_dtype, enabled=autocast_dtype is not None):
                    micro = sharing.loss_sum(model, net, inputs) / targets  # logits only where labelled
                loss = micro * ctx.world_size if ctx.enabled else micro
                (scaler.scale(loss) if scaler is not None else loss).backward()
            step_loss += micro.detach().float()
            step_tokens += sum(len(r.input_ids) for r in batch)
        if ctx.enabled:  # the step's loss over all ranks, and whether any rank was asked to stop
            stats = torch.stack([step_loss, torch.tensor(float(STOP.requested), device=device)])
            step_loss, stops = distributed.all_reduce_sum(stats, "loss and stop-flag all-reduce").unbind()
            steps.stopping = bool(stops > 0)
        steps.apply_gradients(hp.max_grad_norm)
        step_loss = float(step_loss)
        if device == "cuda":
            torch.cuda.synchronize()
        state.seconds += time.perf_counter() - started
        state.tokens += step_tokens
        state.step += 1
        state.losses.append([state.step, round(step_loss, 6)])
        if on_step:
            on_step(state.step, total, step_loss, lr, state.tokens / max(state.seconds, 1e-9))
        if evaluation is not None and (state.step % hp.eval_interval_steps == 0 or state.step == total):
            _evaluate(state, evaluation, hp.early_stopping_patience)
        return state.stopped_early

    model.train()
    steps.run(state, step, meta)
    state.held_bytes = sharding.held_bytes(model, optimizer)
    return state


def _evaluate(state: TrainState, evaluation: Evaluation, patience: Optional[int]) -> None:
    loss = evaluation.measure()
    state.validation.append([state.step, round(loss, 6)])
    if state.best_loss is None or loss < state.best_loss:
        state.best_step, state.best_loss, state.stale = state.step, loss, 0
        evaluation.on_best(state.step, loss)
    else:
        state.stale += 1
    log(f"step {state.step}: validation loss {loss:.6f} (best {state.best_loss:.6f} at step {state.best_step})")
    if patience and state.stale >= patience:
        state.stopped_early = True
        log(f"early stopping at step {state.step}: no lower validation loss in {patience} evaluation(s); "
            f"the adapter is the one from step {state.best_step}")


def padding(rows: Sequence[Encoded], schedule: Sequence[Sequence[Sequence[int]]], packing: bool,
            capacity: int) -> dict[str, int]:
    """Real and pad tokens the whole schedule feeds the model, as laid out and as plain padding would
    (one process's view; what packing saves)."""
    real = padded = unpacked = 0
    for step in schedule:
        for micro in step:
            batch = [rows[i] for i in micro]
            real += sum(len(r.input_ids) for r in batch)
            padded += batches.padded_tokens(batch, packing, capacity)
            unpacked += batches.padded_tokens(batch, False, capacity)
    return {"tokens": real, "pad_tokens": padded - real, "pad_tokens_unpacked": unpacked - real}


def mean_loss(model: Any, rows: Sequence[Encoded], batch_size: int, pad_id: int, device: str, autocast_dtype: Any) -> float:
    """Mean supervised-token loss over `rows` (no gradient)."""
    import torch

    model.eval()
    total_loss, total_targets = 0.0, 0
    with torch.inference_mode():
        for start in range(0, len(rows), batch_size):
            batch = rows[start:start + batch_size]
            targets = supervised_targets(batch)
            inputs = batches.collate(batch, pad_id).to(device).inputs
            with torch.autocast(device_type=device, dtype=autocast_dtype, enabled=autocast_dtype is not None):
                total_loss += float(token_loss_sum(model, model, inputs))
            total_targets += targets
    model.train()
    return total_loss / max(total_targets, 1)
