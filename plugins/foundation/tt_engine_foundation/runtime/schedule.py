"""Pretraining schedules, pure functions of the optimizer step (so a resumed run continues them exactly).

- `warmdown` (the default): linear warm-up over `warmup_steps`, the peak held, then a linear warm-down
  to `min_lr_ratio` of the peak over the last `warmdown_fraction` of the steps.
- `cosine`: linear warm-up, then cosine decay to `min_lr_ratio` of the peak (tt's schedule before Muon).

With Muon, its momentum warms from `momentum_start` to `momentum_end` over the first tenth of the run
(at least the warm-up) and eases to 0.90 during the warm-down; its weight decay follows a cosine to zero
over the run.
"""

from __future__ import annotations

import math

SCHEDULES = ("warmdown", "cosine")


def lr_multiplier(step: int, total: int, warmup: int, min_ratio: float, kind: str = "warmdown",
                  warmdown_fraction: float = 0.5) -> float:
    """Fraction of the peak rate at optimizer step `step` (0-based) of `total`."""
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    if kind == "cosine":
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))
    if kind != "warmdown":
        raise ValueError(f"unknown learning-rate schedule {kind!r} (one of {', '.join(SCHEDULES)})")
    warmdown = max(1, round(warmdown_fraction * total))
    start = total - warmdown
    if step < start:
        return 1.0
    left = (total - step) / warmdown  # 1 at the warm-down's first step, 1/warmdown at the last
    return min_ratio + (1.0 - min_ratio) * left


def muon_momentum(step: int, total: int, warmup: int, start: float, end: float, warmdown_fraction: float) -> float:
    ramp = max(warmup, total // 10, 1)
    if step < ramp:
        return start + (end - start) * step / ramp
    warmdown = max(1, round(warmdown_fraction * total))
    begin = total - warmdown
    if step >= begin:
        progress = (step - begin) / warmdown
        return end - (end - 0.90) * progress if end > 0.90 else end
    return end


def muon_weight_decay(step: int, total: int, base: float) -> float:
    return base * 0.5 * (1.0 + math.cos(math.pi * step / max(1, total)))


def apply(optimizer, step: int, total: int, warmup: int, min_ratio: float, kind: str,
          warmdown_fraction: float) -> float:
    """Set every group's rate (its `base_lr` times the multiplier) and, for Muon groups, momentum (over the
    optimizer's `momentum_range`, runtime.optim.MuonAdamW) and decay; returns the multiplier."""
    mult = lr_multiplier(step, total, warmup, min_ratio, kind, warmdown_fraction)
    for group in optimizer.param_groups:
        group["lr"] = group["base_lr"] * mult
        if "base_weight_decay" in group:  # a Muon group
            group["momentum"] = muon_momentum(step, total, warmup, *optimizer.momentum_range, warmdown_fraction)
            group["weight_decay"] = muon_weight_decay(step, total, group["base_weight_decay"])
    return mult
