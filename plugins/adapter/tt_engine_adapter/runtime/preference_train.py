"""The preference training loop on the SFT adapter: seeded schedule of pairs, AdamW with the spec's warmup and
decay, checkpoints and SIGTERM/resume as the train stage's (runtime/checkpoint.py, bit-for-bit on CPU).

Each optimizer step takes `preference.batch_size` pairs (runtime/train.build_schedule, seeded), scores their
chosen and rejected completions (and KTO's KL sequences) in one forward pass with the adapter trained, and
reads the reference log-probs the reference stage wrote: no reference forward happens here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from tt_engine_adapter.runtime import checkpoint
from tt_engine_adapter.runtime.chat import Encoded
from tt_engine_adapter.runtime.config import AdapterSettings, PreferenceSettings
from tt_engine_adapter.runtime.preference_loss import batch_loss, completion_logps
from tt_engine_adapter.runtime.train import build_schedule, lr_at
from tt_stagekit.protocol import STOP, Interrupted, log


@dataclass
class PreferenceState:
    step: int = 0
    seconds: float = 0.0
    losses: list = field(default_factory=list)  # [[step, loss], ...]
    margins: list = field(default_factory=list)  # [[step, reward margin], ...]
    accuracy: list = field(default_factory=list)  # [[step, reward accuracy], ...]


def train_preference(model: Any, encoded: Sequence[tuple[Encoded, Encoded]], kl_rows: Sequence[Encoded],
                     references: Sequence[dict], hp: AdapterSettings, pref: PreferenceSettings, *, pad_id: int,
                     device: str, checkpoint_dir: Path, stage_fingerprint: str, resume: bool,
                     on_step: Optional[Callable[[int, int, float, dict], None]] = None) -> PreferenceState:
    """Train the PEFT `model` in place on the pairs; raises Interrupted after a checkpoint on SIGTERM."""
    import random

    import torch

    random.seed(hp.seed)
    torch.manual_seed(hp.seed)
    schedule = build_schedule(len(encoded), pref.batch_size, 1, pref.n_epochs, hp.seed, pref.max_steps)
    total = len(schedule)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=pref.learning_rate, betas=(0.9, 0.999), eps=1e-8,
                                  weight_decay=hp.weight_decay)
    state = PreferenceState()
    if resume:
        found = checkpoint.latest(checkpoint_dir, stage_fingerprint)
        if found:
            path, meta = found
            checkpoint.restore(path, model, optimizer)
            state = PreferenceState(step=meta["step"], seconds=meta["seconds"], losses=meta["losses"],
                                    margins=meta["margins"], accuracy=meta["accuracy"])
            log(f"resumed from {path.name} at step {state.step}/{total}")
        else:
            log("no usable checkpoint; preference training from the start", "warning")

    def save() -> None:
        meta = {"fingerprint": stage_fingerprint, "seconds": state.seconds, "losses": state.losses,
                "margins": state.margins, "accuracy": state.accuracy, "total_steps": total}
        checkpoint.save(checkpoint_dir, state.step, model, optimizer, meta, hp.keep_checkpoints)

    model.train()
    while state.step < total:
        if STOP.requested:
            save()
            raise Interrupted(f"{STOP.signal_name or 'SIGTERM'}: checkpoint saved at step {state.step}/{total}; "
                              "resume to continue")
        started = time.perf_counter()
        lr = lr_at(state.step, total, pref.learning_rate, hp.warmup_ratio, hp.lr_scheduler)
        for group in optimizer.param_groups:
            group["lr"] = lr
        picked = schedule[state.step][0]
        value, stats = _step_loss(model, [encoded[i] for i in picked], [kl_rows[i] for i in picked],
                                  [references[i] for i in picked], pref, pad_id, device)
        value.backward()
        if hp.max_grad_norm:
            torch.nn.utils.clip_grad_norm_(trainable, hp.max_grad_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        loss = float(value.detach())
        state.seconds += time.perf_counter() - started
        state.step += 1
        state.losses.append([state.step, round(loss, 6)])
        state.margins.append([state.step, round(stats["reward_margin"], 6)])
        state.accuracy.append([state.step, round(stats["reward_accuracy"], 6)])
        if on_step:
            on_step(state.step, total, loss, {**stats, "lr": lr})
        if state.step % hp.checkpoint_interval_steps == 0 and state.step < total:
            save()
    return state


def _step_loss(model: Any, pairs: Sequence[tuple[Encoded, Encoded]], kl_rows: Sequence[Encoded],
               references: Sequence[dict], pref: PreferenceSettings, pad_id: int, device: str):
    import torch

    n = len(pairs)
    rows = [c for c, _ in pairs] + [r for _, r in pairs] + (list(kl_rows) if pref.loss == "kto" else [])
    sums, counts, (per_token, mask) = completion_logps(model, rows, pad_id, device)
    policy = {"pc": sums[:n], "pr": sums[n:2 * n], "nc": counts[:n], "nr": counts[n:2 * n],
              "chosen_tokens": (per_token[:n], mask[:n]), "kl": sums[2 * n:]}

    def column(key: str):
        return torch.tensor([r[key] for r in references], dtype=sums.dtype, device=sums.device)

    reference = {"rc": column("ref_chosen"), "rr": column("ref_rejected"), "kl": column("ref_kl")}
    return batch_loss(pref.loss, policy, reference, pref.beta, pref.simpo_gamma, pref.sft_weight)
