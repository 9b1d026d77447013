"""A preference batch's loss: the spec's `preference.loss` (dpo.py, simpo.py, kto.py) plus `sft_weight` times the
chosen answers' mean per-token NLL (DPOTrainer's loss_type "sft" with loss_weights), and the reward statistics
the stage logs. Runs in the engine environment.

The formulas are TRL's (trl 1.16), so a user moving from TRL gets the same numbers (tests/test_preference_trl.py
compares loss and gradients on the same batch with DPOTrainer, CPOTrainer and KTOTrainer, float32, within 1e-5).
The loss of a batch is the mean over its pairs (KTO: over its examples).
"""

from __future__ import annotations

from typing import Any

from tt_engine_adapter.runtime.preference.dpo import dpo_losses
from tt_engine_adapter.runtime.preference.kto import kl_estimate, kto_losses
from tt_engine_adapter.runtime.preference.simpo import simpo_losses


def sft_nll(per_token_chosen: Any, mask_chosen: Any) -> Any:
    """Mean NLL per chosen completion token (DPOTrainer's "sft" loss)."""
    return -per_token_chosen[mask_chosen].mean()


def batch_loss(loss: str, policy: dict[str, Any], reference: dict[str, Any], beta: float, gamma: float,
               sft_weight: float) -> tuple[Any, dict[str, float]]:
    """The batch's loss and its reward statistics. `policy`: pc, pr (summed log-probs), nc, nr (token counts),
    chosen_tokens (per-token log-probs, mask), kl (KTO's mismatched sequences); `reference`: rc, rr, kl."""
    pc, pr = policy["pc"], policy["pr"]
    if loss == "dpo":
        losses = dpo_losses(pc, pr, reference["rc"], reference["rr"], beta)
    elif loss == "simpo":
        losses = simpo_losses(pc, pr, policy["nc"], policy["nr"], beta, gamma)
    else:
        z = kl_estimate(policy["kl"], reference["kl"])
        losses = kto_losses(pc, pr, reference["rc"], reference["rr"], z, beta)
    value = losses.mean()
    if sft_weight:
        value = value + sft_weight * sft_nll(*policy["chosen_tokens"])
    if loss == "simpo":
        chosen, rejected = beta * (pc / policy["nc"]).detach(), beta * (pr / policy["nr"]).detach()
    else:
        chosen, rejected = beta * (pc - reference["rc"]).detach(), beta * (pr - reference["rr"]).detach()
    stats = {"reward_margin": float((chosen - rejected).mean()),
             "reward_accuracy": float((chosen > rejected).float().mean())}
    return value, stats
