"""GRPO's arithmetic (the reinforcement algorithm): group-normalised advantages, per-token log-probabilities and
the clipped objective. Runs in the engine environment.

The same formulas as TRL's `GRPOTrainer` (tests/test_grpo_loss.py holds them equal within 1e-5 in float32):

- advantage of answer i in its group: `(r_i - mean(group)) / (std(group) + 1e-4)` (unbiased std; `scale_rewards
  "none"` leaves the division out);
- log-probabilities of the answer tokens at the sampling temperature (logits / temperature);
- per token: `-min(ratio * A, clip(ratio, 1 - eps, 1 + eps) * A)` with `ratio = exp(logp - logp_old)`, plus
  `beta * (exp(ref - logp) - (ref - logp) - 1)` (the k3 KL estimate to the reference) when beta > 0;
- reduced over the answer tokens of the whole step (`dapo`: the sum over every answer token divided by their
  number) or per answer then over answers (`grpo`).

`step_loss_weights` splits that reduction over micro-batches so their summed losses equal the whole step's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from tt_engine_adapter.runtime.logits import label_logps

STD_EPS = 1e-4  # TRL's: keeps a group with zero spread at advantage 0 instead of a division by zero


def group_advantages(rewards: Any, group_size: int, scale: str = "group") -> tuple[Any, Any]:
    """(advantages, per-answer group std) for `rewards` laid out group after group (`[groups * group_size]`)."""
    grouped = rewards.view(-1, group_size)
    mean = grouped.mean(dim=1).repeat_interleave(group_size)
    std = grouped.std(dim=1, unbiased=True).repeat_interleave(group_size)
    advantages = rewards - mean
    if scale == "group":
        advantages = advantages / (std + STD_EPS)
    return advantages, std


def token_logps(model: Any, input_ids: Any, attention_mask: Any, n_completion: int, temperature: float,
                position_ids: Any = None, answer_mask: Any = None) -> Any:
    """Log-probabilities `[rows, n_completion]` of the last `n_completion` tokens of each row, the logits divided
    by `temperature` (as the rollouts sampled them). With `answer_mask` (`[rows, n_completion]`, 1 on an answer
    token, 0 on its padding) the head runs on the answer tokens alone and a padding position reads 0."""
    labels = answer_labels(input_ids, n_completion, answer_mask)
    extra = {"position_ids": position_ids} if position_ids is not None else {}
    per_token = label_logps(model, model, {"input_ids": input_ids, "attention_mask": attention_mask, **extra},
                            labels, temperature)
    return per_token[:, -n_completion:]


def answer_labels(input_ids: Any, n_completion: int, answer_mask: Any = None) -> Any:
    """Labels `[rows, width]`: the last `n_completion` tokens (not their padding, with `answer_mask`), -100 before."""
    import torch

    labels = torch.full_like(input_ids, -100)
    tail = input_ids[:, -n_completion:]
    labels[:, -n_completion:] = tail if answer_mask is None else tail.masked_fill(answer_mask == 0, -100)
    return labels


@dataclass
class LossParts:
    """One micro-batch's loss and what is logged about it (means over its answer tokens)."""

    loss: Any
    kl: float
    clipped: float


def per_token_loss(logps: Any, old_logps: Any, ref_logps: Any, advantages: Any, beta: float,
                   epsilon: float) -> tuple[Any, Any, Any]:
    """(per-token loss, per-token KL or None, clipped mask) of the clipped objective."""
    import torch

    ratio = torch.exp(logps - old_logps)
    clipped_ratio = torch.clamp(ratio, 1 - epsilon, 1 + epsilon)
    adv = advantages.unsqueeze(1)
    loss = -torch.min(ratio * adv, clipped_ratio * adv)
    kl = None
    if beta != 0.0:
        kl = torch.exp(ref_logps - logps) - (ref_logps - logps) - 1
        loss = loss + beta * kl
    clipped = ((ratio < 1 - epsilon) & (adv < 0)) | ((ratio > 1 + epsilon) & (adv > 0))
    return loss, kl, clipped


def reduce_loss(token_loss: Any, mask: Any, loss_type: str, total_answers: int, total_tokens: int) -> Any:
    """This micro-batch's share of the step loss: micro-batch shares add up to the whole step's reduction."""
    if loss_type == "grpo":
        per_answer = (token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
        return per_answer.sum() / total_answers
    return (token_loss * mask).sum() / max(total_tokens, 1)


def micro_loss(logps: Any, old_logps: Any, ref_logps: Any, advantages: Any, mask: Any, *, beta: float,
               epsilon: float, loss_type: str, total_answers: int, total_tokens: int) -> LossParts:
    token_loss, kl, clipped = per_token_loss(logps, old_logps, ref_logps, advantages, beta, epsilon)
    loss = reduce_loss(token_loss, mask, loss_type, total_answers, total_tokens)
    tokens = float(mask.sum().clamp(min=1.0))
    kl_mean = float((kl.detach() * mask).sum()) / tokens if kl is not None else 0.0
    return LossParts(loss=loss, kl=kl_mean, clipped=float((clipped.float() * mask).sum()) / tokens)


def learning_rows(advantages: Any, beta: float) -> list[int]:
    """The rows whose answers move the loss: all of them with a KL term (beta > 0); without one, the rows
    whose advantage is not exactly 0 (a group whose answers all scored the same): their per-token loss
    `-min(ratio * 0, clip * 0)` is 0 whatever the weights, so their forward and backward change nothing."""
    if beta != 0.0:
        return list(range(int(advantages.shape[0])))
    return [i for i, a in enumerate(advantages.tolist()) if a != 0.0]


def zero_gradients(model: Any) -> None:
    """Every trainable tensor's gradient set to zeros (what a step whose answers all had advantage 0 computes)."""
    import torch

    for p in model.parameters():
        if p.requires_grad:
            p.grad = torch.zeros_like(p) if p.grad is None else p.grad


def spread(rewards: Sequence[float], group_size: int) -> list[float]:
    """Each group's reward std (population; 0 when every answer scored the same) — the probe's measure."""
    out = []
    for start in range(0, len(rewards), group_size):
        group = rewards[start:start + group_size]
        mean = sum(group) / len(group)
        out.append((sum((r - mean) ** 2 for r in group) / len(group)) ** 0.5)
    return out
