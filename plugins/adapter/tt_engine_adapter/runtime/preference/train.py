"""The preference training loop on the SFT adapter: seeded schedule of pairs, AdamW with the spec's warmup and
decay, checkpoints and SIGTERM/resume by the skeleton every tuning shares (runtime/loop.py, bit-for-bit on CPU).
Runs in the engine environment.

Each optimizer step takes `preference.batch_size` pairs (runtime/train.build_schedule, seeded), scores their
chosen and rejected completions (and KTO's KL sequences) in one forward pass with the adapter trained, and
reads the reference log-probs the reference stage wrote: no reference forward happens here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from tt_engine_adapter.runtime import loop
from tt_engine_adapter.runtime.chat import Encoded
from tt_engine_adapter.runtime.config import AdapterSettings, PreferenceSettings
from tt_engine_adapter.runtime.preference.logps import completion_logps
from tt_engine_adapter.runtime.prefix import Sharing
from tt_engine_adapter.runtime.preference.loss import batch_loss
from tt_engine_adapter.runtime.train import build_schedule, lr_at
from tt_stagekit.protocol import log


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
    optimizer = loop.adamw(loop.trainable(model), pref.learning_rate, hp.weight_decay)
    steps = loop.StepLoop(model, optimizer, loop.Checkpoints(checkpoint_dir, stage_fingerprint,
                                                             hp.checkpoint_interval_steps, hp.keep_checkpoints), total)
    state = PreferenceState()
    found = steps.restore(resume, fresh="preference training")
    if found:
        path, meta = found
        state = PreferenceState(step=meta["step"], seconds=meta["seconds"], losses=meta["losses"],
                                margins=meta["margins"], accuracy=meta["accuracy"])
        log(f"resumed from {path.name} at step {state.step}/{total}")

    def meta() -> dict:
        return {"fingerprint": stage_fingerprint, "seconds": state.seconds, "losses": state.losses,
                "margins": state.margins, "accuracy": state.accuracy, "total_steps": total}

    def step() -> None:
        started = time.perf_counter()
        lr = lr_at(state.step, total, pref.learning_rate, hp.warmup_ratio, hp.lr_scheduler)
        steps.set_lr(lr)
        picked = schedule[state.step][0]
        value, stats = _step_loss(model, [encoded[i] for i in picked], [kl_rows[i] for i in picked],
                                  [references[i] for i in picked], pref, pad_id, device, sharing)
        value.backward()
        steps.apply_gradients(hp.max_grad_norm)
        loss = float(value.detach())
        state.seconds += time.perf_counter() - started
        state.step += 1
        state.losses.append([state.step, round(loss, 6)])
        state.margins.append([state.step, round(stats["reward_margin"], 6)])
        state.accuracy.append([state.step, round(stats["reward_accuracy"], 6)])
        if on_step:
            on_step(state.step, total, loss, {**stats, "lr": lr})

    sharing = Sharing.decide(model, False, hp.gradient_checkpointing, False)
    log(sharing.reason)
    model.train()
    steps.run(state, step, meta)
    return state


def _step_loss(model: Any, pairs: Sequence[tuple[Encoded, Encoded]], kl_rows: Sequence[Encoded],
               references: Sequence[dict], pref: PreferenceSettings, pad_id: int, device: str,
               sharing: Optional[Sharing] = None):
    import torch

    n = len(pairs)
    rows = [c for c, _ in pairs] + [r for _, r in pairs] + (list(kl_rows) if pref.loss == "kto" else [])
    sums, counts, (per_token, mask) = completion_logps(model, rows, pad_id, device, sharing)
    policy = {"pc": sums[:n], "pr": sums[n:2 * n], "nc": counts[:n], "nr": counts[n:2 * n],
              "chosen_tokens": (per_token[:n], mask[:n]), "kl": sums[2 * n:]}

    def column(key: str):
        return torch.tensor([r[key] for r in references], dtype=sums.dtype, device=sums.device)

    reference = {"rc": column("ref_chosen"), "rr": column("ref_rejected"), "kl": column("ref_kl")}
    return batch_loss(pref.loss, policy, reference, pref.beta, pref.simpo_gamma, pref.sft_weight)
