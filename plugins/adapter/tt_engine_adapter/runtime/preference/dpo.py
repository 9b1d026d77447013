"""DPO, Direct Preference Optimization (`preference.loss: "dpo"`), TRL's DPOTrainer with loss_type "sigmoid":
`-logsigmoid(beta * ((pc - rc) - (pr - rr)))`, pc/pr the policy's summed completion log-probs of the chosen and
rejected answers, rc/rr the reference's (the SFT adapter, or the base with it disabled: `preference.reference`).
Runs in the engine environment."""

from __future__ import annotations

from typing import Any


def dpo_losses(pc: Any, pr: Any, rc: Any, rr: Any, beta: float) -> Any:
    """Per-pair DPO losses."""
    import torch.nn.functional as F

    return -F.logsigmoid(beta * ((pc - rc) - (pr - rr)))
