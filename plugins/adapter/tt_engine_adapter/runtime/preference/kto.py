"""KTO, Kahneman-Tversky Optimization (`preference.loss: "kto"`), TRL's KTOTrainer with loss_type "kto": each pair
gives a desirable (chosen) and an undesirable (rejected) example; `1 - sigmoid(beta * (logratio - z))` and
`1 - sigmoid(beta * (z - logratio))`, z the KL estimate: mean(policy - reference log-probs of mismatched
prompt/completion sequences), clamped at 0, no gradient. Runs in the engine environment."""

from __future__ import annotations

from typing import Any


def kto_losses(pc: Any, pr: Any, rc: Any, rr: Any, kl: Any, beta: float) -> Any:
    """Per-example losses, desirable (chosen) first then undesirable (rejected), as KTOTrainer concatenates them."""
    import torch

    desirable = 1 - torch.sigmoid(beta * ((pc - rc) - kl))
    undesirable = 1 - torch.sigmoid(beta * (kl - (pr - rr)))
    return torch.cat([desirable, undesirable])


def kl_estimate(policy_kl: Any, reference_kl: Any) -> Any:
    """KTO's z: the mean log-ratio of the mismatched sequences, no gradient, at least 0."""
    return (policy_kl - reference_kl).mean().detach().clamp(min=0)
