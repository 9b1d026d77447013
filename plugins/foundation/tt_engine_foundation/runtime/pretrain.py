"""The pretraining loop: Muon + AdamW (or AdamW), warm-up + warm-down (or cosine), accumulation, clipping,
checkpoints, resume.

Data order is a pure function of (seed, samples consumed), the learning rate a
pure function of the step, and checkpoints restore weights, optimizer and RNG
exactly, so on CPU a killed-and-resumed run ends byte-identical to an
uninterrupted one. SIGTERM/SIGINT set a flag checked after every optimizer
step: the loop checkpoints the current step and raises `Interrupted`.
Under torchrun (DistributedDataParallel) the ranks split each global batch
(`sharding.shard_plan`) and agree, in one all-reduce per step, on the mean
loss and on whether to stop or save, so the checkpoint is taken once, at the
same step on every rank. A step's loss is the mean over every scored target
of its global batch (packed rows end in unscored padding, so forwards score
different numbers of targets): each forward's mean is weighted by its share of
them, so the gradient is the single-process one whatever the world size and
however the batch is split into forwards.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Mapping, Optional

import numpy as np
import torch
from tt_stagekit import distributed
from tt_stagekit.files import append_line
from tt_stagekit.protocol import Interrupted, StageError, log, progress, stop_requested

from tt_engine_foundation.formats.weights import PRETRAIN_FIELDS, used_settings
from tt_engine_foundation.runtime import checkpoints
from tt_engine_foundation.runtime.config import FoundationSettings
from tt_engine_foundation.runtime.loss import cross_entropy
from tt_engine_foundation.runtime.model import GPT, ModelConfig
from tt_engine_foundation.runtime import schedule, torchsetup
from tt_engine_foundation.runtime.hyperparams import muon_rates
from tt_engine_foundation.runtime.optim import build_adamw, build_muon_adamw
from tt_engine_foundation.runtime.packing import PAD_TARGET, PackedRows, inputs_and_targets
from tt_engine_foundation.runtime.sharding import shard_plan
from tt_engine_foundation.runtime.token_cache import Windows


def training_config(cfg: FoundationSettings, model_cfg: ModelConfig, peak_lr: float, data: Mapping[str, Any]) -> dict:
    """Everything the weights depend on (formats.weights.PRETRAIN_FIELDS, the learning rate as used, the model,
    the data); its hash is the checkpoint fingerprint."""
    return {
        "model": model_cfg.to_dict(),
        **used_settings(cfg, PRETRAIN_FIELDS, peak_lr),
        "token_cache_sha256": data["token_cache_sha256"],
        "tokenizer_sha256": data["tokenizer_sha256"],
    }


def build_optimizer(cfg: FoundationSettings, model: GPT, peak_lr: float, device, compute_dtype=None):
    """`foundation.optimizer`: AdamW at `peak_lr`, or Muon + AdamW with `peak_lr` as Muon's matrix rate (its
    Newton-Schulz iteration in bf16 where the steps compute in bf16, `compute_dtype`)."""
    if cfg.optimizer == "adamw":
        return build_adamw(model, peak_lr, cfg.weight_decay, device)
    width = model.cfg.hidden_size
    rates = muon_rates(width, model.cfg.num_hidden_layers, model.cfg.vocab_size, cfg.tokens_per_step, peak_lr)
    return build_muon_adamw(model, rates, device, ns_bf16=compute_dtype == torch.bfloat16)


def run_pretraining(
    *,
    cfg: FoundationSettings,
    model_cfg: ModelConfig,
    tokens: np.ndarray,
    device,
    peak_lr: float,
    config: Mapping[str, Any],
    fingerprint: str,
    checkpoint_dir: Path,
    backup_dir: Optional[Path],
    heartbeat_path: Path,
    packing_table: Optional[np.ndarray] = None,
) -> tuple[GPT, checkpoints.TrainerState, dict[str, Any]]:
    """Train (or continue) to cfg.pretrain_steps; returns model, final state and run figures.

    Under torchrun every rank runs this with the same arguments (see tt_stagekit.distributed):
    rank 0 alone chooses the checkpoint, writes checkpoints and heartbeats.
    """
    ctx = distributed.context()
    choice = checkpoints.choose(checkpoint_dir, backup_dir, fingerprint, config)

    seed = cfg.seed
    torch.manual_seed(seed)
    np.random.seed(seed % (2**32))
    model = GPT(model_cfg)
    model.init_weights(seed)
    model.gradient_checkpointing = cfg.gradient_checkpointing
    model.to(device)
    compute_dtype = torchsetup.training_autocast_dtype(cfg, device)
    optimizer = build_optimizer(cfg, model, peak_lr, device, compute_dtype)
    if choice.path is not None:
        state = checkpoints.restore(choice.path, model, optimizer, device)
        log(f"resumed pretraining from {choice.path} at step {state.step}"
            + (f" with {ctx.world_size} processes" if ctx.enabled else ""))
    else:
        state = checkpoints.TrainerState()
    ddp = distributed.wrap(model, device)

    total = cfg.pretrain_steps
    batch, accum, seq = cfg.batch_size, cfg.gradient_accumulation_steps, cfg.sequence_length
    plan = shard_plan(batch, accum, ctx.world_size, ctx.rank)
    if packing_table is not None:  # BOS-aligned rows, padding as PAD_TARGET (runtime/packing.py)
        windows = PackedRows(tokens, packing_table, seq + 1, model_cfg.bos_token_id, model_cfg.pad_token_id, seed,
                             cfg.document_start_share)
    else:
        windows = Windows(tokens, seq, seed)
    tokens_per_step = batch * accum * seq  # the global batch, whatever the world size
    autocast = torchsetup.autocast(compute_dtype, device)
    step_fn = ddp
    if cfg.compile:
        step_fn = torch.compile(ddp)
    clip = cfg.gradient_clip
    log_every = cfg.log_interval_steps
    every_steps = cfg.checkpoint_interval_steps
    every_seconds = cfg.checkpoint_interval_seconds
    keep = cfg.keep_checkpoints

    saver = checkpoints.Saver(checkpoint_dir, keep, backup_dir)

    def save(reason: str) -> Path:
        state.scheduler = {"kind": cfg.lr_schedule, "optimizer": cfg.optimizer, "step": state.step, "total": total,
                           "peak_lr": peak_lr, "warmup_steps": cfg.warmup_steps, "min_lr_ratio": cfg.min_lr_ratio,
                           "warmdown_fraction": cfg.warmdown_fraction}
        return checkpoints.save(saver, model, optimizer, state, config, fingerprint, reason)

    model.train()
    started = time.monotonic()
    last_save = started
    prev_tick = started
    window_start, window_tokens = started, 0
    run_tokens = 0
    timed_start: Optional[float] = None
    timed_tokens = 0
    losses: list[tuple[int, float]] = []
    train_seconds = 0.0
    try:
        while state.step < total:
            step_started = time.monotonic()
            lr = peak_lr * schedule.apply(optimizer, state.step, total, cfg.warmup_steps, cfg.min_lr_ratio,
                                          cfg.lr_schedule, cfg.warmdown_fraction)
            loss_sum = torch.zeros((), device=device)
            step_start = state.samples_consumed
            scored = max(1, windows.targets(step_start, batch * accum))  # the global batch's, every rank's
            for micro in range(plan.micro_steps):
                start = plan.start(step_start, micro)
                rows = torch.from_numpy(windows.batch(start, plan.micro_batch)).to(device, non_blocking=True)
                share = windows.targets(start, plan.micro_batch) / scored  # this forward's part of the step's mean
                with distributed.no_sync(ddp, micro < plan.micro_steps - 1), distributed.collective("gradient all-reduce"):
                    inputs, targets = inputs_and_targets(rows, model_cfg.pad_token_id)
                    with autocast:
                        logits = step_fn(inputs)
                    loss = cross_entropy(logits.reshape(-1, logits.size(-1)).float(), targets.reshape(-1), PAD_TARGET)
                    (loss * (share * ctx.world_size)).backward()  # DDP averages over ranks: x world gives the sum
                loss_sum += loss.detach() * share
            state.samples_consumed = step_start + batch * accum
            interrupted = stop_requested()
            time_due = every_seconds > 0 and time.monotonic() - last_save >= every_seconds
            if ctx.enabled:  # one collective: the global mean loss, and whether any rank stops or is due to save
                flags = torch.tensor([float(interrupted), float(time_due)], device=device)
                stats = distributed.all_reduce_sum(torch.cat([loss_sum.reshape(1), flags]), "loss and stop-flag all-reduce")
                step_loss, stops, dues = stats.tolist()
                interrupted, time_due = stops > 0, dues > 0
            else:
                step_loss = float(loss_sum)  # one device sync per step
            if not np.isfinite(step_loss):
                raise StageError(
                    f"pretraining loss became {step_loss} at step {state.step + 1}; "
                    "lower foundation.learning_rate or raise foundation.warmup_steps (last checkpoint kept)"
                )
            if clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            state.step += 1
            state.tokens_seen += tokens_per_step
            state.last_loss = step_loss
            run_tokens += tokens_per_step
            window_tokens += tokens_per_step
            if device.type == "cuda":
                torch.cuda.synchronize()
            now = time.monotonic()
            if timed_start is None:
                timed_start = now  # the first step (warm-up, compilation) is not timed
            else:
                timed_tokens += tokens_per_step
                train_seconds += now - step_started  # compute only: heartbeats and checkpoints excluded
            state.elapsed_seconds += now - prev_tick
            prev_tick = now
            losses.append((state.step, step_loss))
            if ctx.is_main and (state.step % log_every == 0 or state.step == total):
                rate = window_tokens / max(now - window_start, 1e-9)
                row = {"step": state.step, "loss": step_loss, "lr": lr, "tokens_per_second": rate,
                       "elapsed": state.elapsed_seconds, "tokens_seen": state.tokens_seen,
                       "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
                append_line(heartbeat_path, json.dumps(row))  # 0600, O_APPEND, one fsync a line
                progress(state.step, total, "step", {"loss": step_loss, "lr": lr, "tokens_per_second": rate})
                window_start, window_tokens = now, 0
            reasons = (("signal", interrupted), ("stage_end", state.step == total),
                       ("interval", every_steps > 0 and state.step % every_steps == 0), ("time", time_due))
            due = next((reason for reason, applies in reasons if applies), None)  # the first that applies
            if due:
                path = save(due)
                last_save = time.monotonic()
                if interrupted:
                    who = "" if ctx.is_main else " by rank 0"
                    raise Interrupted(f"pretraining stopped: checkpoint {path.name} saved{who} at step {state.step}")
    finally:
        saver.wait()  # the last checkpoint is durable before the stage reports or exits
    if stop_requested() and state.step < total:
        raise Interrupted("pretraining stopped before its first step")
    wall = time.monotonic() - started
    if timed_tokens > 0:
        tps = timed_tokens / max(train_seconds, 1e-9)
    else:
        tps = run_tokens / wall if run_tokens else 0.0
    figures = {"tokens_per_second": tps, "train_seconds": train_seconds, "timed_tokens": timed_tokens, "run_tokens": run_tokens, "losses": losses,
               "resumed_from": str(choice.path) if choice.path else None}
    if packing_table is not None:
        repeats = windows.epoch_rows - windows.count
        figures["document_start_share"] = (len(windows.starts) + repeats) / windows.epoch_rows
        figures["rows_per_epoch"] = windows.epoch_rows
    return model, state, figures


def read_series(heartbeat_path: Path, last_step: int) -> list[list[float]]:
    """Loss curve from the heartbeats file, one point per step (the latest write wins)."""
    points: dict[int, float] = {}
    if heartbeat_path.is_file():
        for line in heartbeat_path.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by a crash
            if isinstance(row, dict) and isinstance(row.get("step"), int) and row["step"] <= last_step:
                points[row["step"]] = float(row["loss"])
    return [[step, points[step]] for step in sorted(points)]
