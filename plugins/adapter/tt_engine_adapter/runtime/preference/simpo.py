"""SimPO, Simple Preference Optimization (`preference.loss: "simpo"`), TRL's CPOTrainer with loss_type "simpo"
and cpo_alpha 0: `-logsigmoid(beta * (pc/|c| - pr/|r| - gamma/beta))`, the mean log-prob per completion token of
the chosen and rejected answers; no reference. Runs in the engine environment."""

from __future__ import annotations

from typing import Any


def simpo_losses(pc: Any, pr: Any, nc: Any, nr: Any, beta: float, gamma: float) -> Any:
    """Per-pair SimPO losses (`nc`, `nr`: completion token counts; `gamma`: `preference.simpo_gamma`)."""
    import torch.nn.functional as F

    return -F.logsigmoid(beta * ((pc / nc - pr / nr) - gamma / beta))
