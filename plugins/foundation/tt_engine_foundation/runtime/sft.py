"""Chat SFT: the compiled training rows, loss on assistant tokens only.

AdamW at `foundation.finetune_learning_rate` (runtime.config.finetune_peak_rate), linear decay to zero
over `finetune_steps`; batches of `batch_size` rows in a seeded order, padded with
`<|pad|>` (padding and prompt tokens are ignored by the loss). With `finetune_corpus_rows` > 0 every
step also trains on that many rows of the pretraining token cache (runtime/replay.py): their loss is added
to the chat loss, its own backward pass before the chat one (the accumulation pattern pretraining uses).

Under torchrun every rank draws the same batch and computes rows
`rank::world_size` of it; its loss is its supervised-token loss sum over the
whole batch's supervised-token count (times the world size, which
DistributedDataParallel's gradient average divides out), so the update is the
single-process one whatever the world size. Ranks agree on stopping through
the same all-reduce that averages the reported loss.

SIGTERM/SIGINT save the current step (into `SftCheckpoints.directory`)
before the stage exits 130, and so does every `checkpoint_interval_steps`
step; a rerun continues from the newest matching checkpoint (weights, AdamW,
RNG, the position in the seeded row order and the losses so far), ending with
the same weights as an uninterrupted run.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from tt_stagekit import distributed
from tt_stagekit import promptfit
from tt_stagekit.protocol import Interrupted, InvalidInput, StageError, log, stop_requested
from tt_stagekit.manifest import MANIFEST

from tt_engine_foundation.formats.weights import SFT_FIELDS, used_settings
from tt_engine_foundation.runtime import checkpoints as ckpt
from tt_engine_foundation.runtime.config import FoundationSettings
from tt_engine_foundation.runtime import tokenizer, torchsetup
from tt_engine_foundation.runtime.chat import fit_example, sequence_error
from tt_engine_foundation.runtime.optim import build_adamw, set_lr
from tt_engine_foundation.runtime.replay import Replay

IGNORE = -100


def build_examples(tok, rows: Sequence[Mapping[str, Any]], sequence_length: int) -> tuple[list[tuple[list[int], list[int]]], int]:
    """(ids, mask) per training row fitted into sequence_length + 1 ids, and how many rows lost user text."""
    out, trimmed = [], 0
    for row in rows:
        try:
            ids, mask, cut = fit_example(tok, row["messages"], sequence_length + 1)
        except promptfit.PromptTooLong as exc:
            raise InvalidInput(f"training row {row.get('id')!r}: "
                               + sequence_error(exc.needed, sequence_length, "its instruction and answer")) from None
        if sum(mask[1:]) == 0:
            raise StageError(f"training row {row.get('id')!r}: no assistant token is left to supervise")
        out.append((ids, mask))
        trimmed += cut
    if not out:
        raise StageError("no training rows to fine-tune on (add examples to the spec)")
    return out, trimmed


def collate(examples: Sequence[tuple[list[int], list[int]]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(ids) for ids, _ in examples) - 1
    x = torch.full((len(examples), width), pad_id, dtype=torch.long)
    y = torch.full((len(examples), width), IGNORE, dtype=torch.long)
    for b, (ids, mask) in enumerate(examples):
        n = len(ids) - 1
        x[b, :n] = torch.tensor(ids[:-1])
        targets = torch.tensor(ids[1:])
        keep = torch.tensor(mask[1:], dtype=torch.bool)
        y[b, :n] = torch.where(keep, targets, torch.full_like(targets, IGNORE))
    return x, y


def supervised_loss(model, x: torch.Tensor, y: torch.Tensor, autocast_dtype, reduction: str = "mean") -> torch.Tensor:
    """Cross-entropy of `x`'s next tokens against the targets `y` (IGNORE where unsupervised), "mean" over the
    supervised targets or their "sum". The head runs on the supervised positions alone (GPT.forward's `where`):
    the same numbers as full logits read at those positions (tests/test_logits_only.py)."""
    where = y != IGNORE
    with torchsetup.autocast(autocast_dtype, x.device):
        logits = model(x, where=where)
    return F.cross_entropy(logits.float(), y[where], reduction=reduction)


def _rank_loss(model, picked, pad: int, device, autocast_dtype, rank: int, world: int) -> torch.Tensor:
    """This rank's share of the batch loss, scaled so DDP's gradient average gives the batch mean."""
    supervised = sum(sum(mask[1:]) for _, mask in picked)
    mine = picked[rank::world]
    x, y = collate(mine or picked[:1], pad)
    if not mine:  # more ranks than rows: take part in the all-reduce with a zero-weight row
        y.fill_(IGNORE)
    total = supervised_loss(model, x.to(device), y.to(device), autocast_dtype, reduction="sum")
    return total * (world / max(1, supervised))


@dataclass
class SftCheckpoints:
    """Where and when SFT checkpoints: `config` is everything the weights depend on (its hash is the
    fingerprint a checkpoint must match); `every_steps` 0 saves only on SIGTERM/SIGINT."""

    directory: Path
    config: Mapping[str, Any]
    every_steps: int
    keep: int

    @property
    def fingerprint(self) -> str:
        return ckpt.config_fingerprint(self.config)


def sft_config(cfg: FoundationSettings, peak_lr: float, rows: Sequence[Mapping[str, Any]], input_model: Path,
               replay: Optional[Replay] = None) -> dict:
    """Everything the SFT weights depend on: the input weights (their sha256 in the model's manifest, which
    a re-run pretraining with identical weights keeps), the rows, formats.weights.SFT_FIELDS (the learning
    rate as used) and, with replay, the token cache's sha256."""
    manifest = json.loads((input_model / MANIFEST).read_text(encoding="utf-8"))
    weights = [f["sha256"] for f in manifest.get("files", []) if f.get("path") == "model.safetensors"]
    return {
        "input_weights_sha256": weights[0] if weights else None,
        "rows_sha256": hashlib.sha256(json.dumps(list(rows), sort_keys=True).encode("utf-8")).hexdigest(),
        **used_settings(cfg, SFT_FIELDS, peak_lr),
        **({"replay_token_cache_sha256": replay.token_cache_sha256} if replay is not None else {}),
    }


def run_sft(
    model,
    tok,
    rows: Sequence[Mapping[str, Any]],
    cfg: FoundationSettings,
    peak_lr: float,
    device,
    autocast_dtype: Optional[torch.dtype],
    on_step: Optional[Callable[[int, int, float, float], None]],
    checkpoints: SftCheckpoints,
    stats: Optional[dict] = None,
    replay: Optional[Replay] = None,
) -> list[tuple[int, float]]:
    """Fine-tune `model` in place; returns the (chat) losses. `stats` receives `trimmed_rows` (rows that lost
    user text) and, with `replay`, `corpus_loss` (the last step's corpus loss) and `corpus_losses` (every
    step's, (step, loss) like the chat losses, kept in checkpoints so a resumed run reports them all)."""
    seq = cfg.sequence_length
    steps = cfg.finetune_steps
    examples, trimmed = build_examples(tok, rows, seq)
    if stats is not None:
        stats["trimmed_rows"] = trimmed
    batch = min(cfg.batch_size, len(examples))
    pad = tokenizer.special_id(tok, tokenizer.PAD)
    torch.manual_seed(cfg.seed + 1)
    optimizer = build_adamw(model, peak_lr, cfg.weight_decay, device)
    dist = distributed.context()
    first, cursor, epoch, losses, corpus_losses = 0, 0, 0, [], []
    if stats is not None and replay is not None:
        stats["corpus_losses"] = corpus_losses
    saver = ckpt.Saver(checkpoints.directory, checkpoints.keep)
    choice = ckpt.choose(checkpoints.directory, None, checkpoints.fingerprint, checkpoints.config)
    if choice.path is not None:  # before DDP wraps the model: its start-up broadcast shares rank 0's weights
        position = ckpt.restore(choice.path, model, optimizer, device).scheduler
        first, cursor, epoch = position["step"], position["cursor"], position["epoch"]
        losses = [(int(s), float(v)) for s, v in position["losses"]]
        corpus_losses[:] = [(int(s), float(v)) for s, v in position.get("corpus_losses", [])]
        log(f"SFT resumed from {choice.path.name} at step {first}/{steps}")
    net = distributed.wrap(model, device)
    clip = cfg.gradient_clip
    model.gradient_checkpointing = cfg.gradient_checkpointing
    model.train()
    order = np.random.default_rng([cfg.seed, 1, epoch]).permutation(len(examples))

    def save(step: int, reason: str) -> Path:
        position = {"kind": "sft_linear_decay", "step": step, "total": steps, "cursor": cursor, "epoch": epoch,
                    "losses": [[s, v] for s, v in losses], "corpus_losses": [[s, v] for s, v in corpus_losses]}
        state = ckpt.TrainerState(step=step, samples_consumed=step * batch, last_loss=losses[-1][1] if losses else None,
                                  scheduler=position)
        return ckpt.save(saver, model, optimizer, state, checkpoints.config, checkpoints.fingerprint, reason)

    try:
        for step in range(first, steps):
            lr = peak_lr * (1.0 - step / max(1, steps))
            set_lr(optimizer, lr)
            picked = []
            for _ in range(batch):
                if cursor >= len(order):
                    epoch += 1
                    order = np.random.default_rng([cfg.seed, 1, epoch]).permutation(len(examples))
                    cursor = 0
                picked.append(examples[int(order[cursor])])
                cursor += 1
            stopping = stop_requested()
            corpus = torch.zeros((), device=device)
            if replay is not None:
                with distributed.no_sync(net, True), distributed.collective("SFT replay gradient"):
                    corpus = replay.loss(net, step, pad, device, autocast_dtype, dist.rank, dist.world_size)
                    corpus.backward()
            corpus_value = float(corpus.detach())
            if dist.enabled:
                with distributed.collective("SFT gradient all-reduce"):
                    loss = _rank_loss(net, picked, pad, device, autocast_dtype, dist.rank, dist.world_size)
                    loss.backward()
                flags = torch.stack([loss.detach() / dist.world_size, torch.tensor(float(stopping), device=device),
                                     corpus.detach() / dist.world_size])
                value_t, stops, corpus_value = distributed.all_reduce_sum(flags, "SFT loss and stop-flag all-reduce").tolist()
                stopping = stops > 0
            else:
                x, y = collate(picked, pad)
                loss = supervised_loss(model, x.to(device), y.to(device), autocast_dtype)
                loss.backward()
            if replay is not None and stats is not None:
                stats["corpus_loss"] = corpus_value
            if clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            value = value_t if dist.enabled else float(loss.detach())
            if not np.isfinite(value):
                raise StageError(f"SFT loss became {value} at step {step + 1}; lower foundation.finetune_learning_rate")
            losses.append((step + 1, value))
            if replay is not None:
                corpus_losses.append((step + 1, corpus_value))
            if on_step is not None:
                on_step(step + 1, steps, value, lr)
            stop_now = stopping or (not dist.enabled and stop_requested())
            every = checkpoints.every_steps
            if stop_now or (every > 0 and (step + 1) % every == 0 and step + 1 < steps):
                path = save(step + 1, "signal" if stop_now else "interval")
                if stop_now:
                    raise Interrupted(f"SFT stopped: checkpoint {path.name} saved at step {step + 1}; "
                                      "--resume continues from it")
    finally:
        saver.wait()  # a checkpoint is durable before the stage reports or exits
    return losses
