"""AdamW construction and the warmup + cosine learning-rate schedule."""

from __future__ import annotations

import math

import torch


def build_adamw(model: torch.nn.Module, lr: float, weight_decay: float, device) -> torch.optim.AdamW:
    """Weight decay on 2-D weights except the embedding; none on norms."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (decay if p.ndim >= 2 and "embed_tokens" not in name else no_decay).append(p)
    groups = [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    fused = device.type == "cuda"
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8, fused=fused)


def lr_at(step: int, total: int, peak: float, warmup: int, min_ratio: float) -> float:
    """Learning rate for optimizer step `step` (0-based): linear warmup, then cosine to peak*min_ratio."""
    if warmup > 0 and step < warmup:
        return peak * (step + 1) / warmup
    decay_steps = max(1, total - warmup)
    progress = min(1.0, (step - warmup) / decay_steps)
    cosine = 0.5 * (1.0 + math.cos(math.pi * progress))
    return peak * (min_ratio + (1.0 - min_ratio) * cosine)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
