"""Preference losses on the LoRA: DPO, SimPO and KTO, and the completion log-probs they read.

The formulas are TRL's (trl 1.16), so a user moving from TRL gets the same numbers (a test compares loss and
gradients on the same batch with DPOTrainer, CPOTrainer and KTOTrainer, float32, within 1e-5):

- DPO (DPOTrainer, loss_type "sigmoid"): -logsigmoid(beta * ((pc - rc) - (pr - rr))), pc/pr the policy's summed
  completion log-probs of chosen/rejected, rc/rr the reference's (the base with the adapter disabled);
- SimPO (CPOTrainer, loss_type "simpo", cpo_alpha 0): -logsigmoid(beta * (pc/|c| - pr/|r| - gamma/beta)), the
  mean log-prob per completion token, no reference;
- KTO (KTOTrainer, loss_type "kto"): each pair gives a desirable (chosen) and an undesirable (rejected)
  example; 1 - sigmoid(beta * (logratio - z)) and 1 - sigmoid(beta * (z - logratio)), z the KL estimate
  mean(policy - reference log-probs of mismatched prompt/completion sequences), clamped at 0, no gradient;
- `sft_weight` adds the chosen answers' mean per-token NLL (DPOTrainer's loss_type "sft" with loss_weights).

The loss of a batch is the mean over its pairs (KTO: over its examples).
"""

from __future__ import annotations

from typing import Any, Sequence

from tt_engine_adapter.runtime.chat import IGNORE_INDEX, Encoded


def collate(rows: Sequence[Encoded], pad_id: int) -> dict[str, Any]:
    """Right-padded `input_ids`, `attention_mask` and `labels` (-100 outside the completions)."""
    import torch

    width = max(len(r.input_ids) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    labels = torch.full((len(rows), width), IGNORE_INDEX, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        n = len(row.input_ids)
        ids[i, :n] = torch.tensor(row.input_ids)
        labels[i, :n] = torch.tensor(row.labels)
        mask[i, :n] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def completion_logps(model: Any, rows: Sequence[Encoded], pad_id: int, device: str) -> tuple[Any, Any, Any]:
    """(summed completion log-probs, completion token counts, per-token log-probs with the mask) of each row,
    in one forward pass; gradients flow when the caller's mode allows them."""
    import torch

    batch = {k: v.to(device) for k, v in collate(rows, pad_id).items()}
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False).logits
    labels = batch["labels"][:, 1:]
    mask = labels != IGNORE_INDEX
    logits = logits[:, :-1, :].float()
    per_token = torch.gather(logits.log_softmax(-1), 2, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    per_token = per_token * mask
    return per_token.sum(-1), mask.sum(-1), (per_token, mask)


def dpo_losses(pc: Any, pr: Any, rc: Any, rr: Any, beta: float) -> Any:
    import torch.nn.functional as F

    return -F.logsigmoid(beta * ((pc - rc) - (pr - rr)))


def simpo_losses(pc: Any, pr: Any, nc: Any, nr: Any, beta: float, gamma: float) -> Any:
    import torch.nn.functional as F

    return -F.logsigmoid(beta * ((pc / nc - pr / nr) - gamma / beta))


def kto_losses(pc: Any, pr: Any, rc: Any, rr: Any, kl: Any, beta: float) -> Any:
    """Per-example losses, desirable (chosen) first then undesirable (rejected), as KTOTrainer concatenates them."""
    import torch

    desirable = 1 - torch.sigmoid(beta * ((pc - rc) - kl))
    undesirable = 1 - torch.sigmoid(beta * (kl - (pr - rr)))
    return torch.cat([desirable, undesirable])


def kl_estimate(policy_kl: Any, reference_kl: Any) -> Any:
    """KTO's z: the mean log-ratio of the mismatched sequences, no gradient, at least 0."""
    return (policy_kl - reference_kl).mean().detach().clamp(min=0)


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
