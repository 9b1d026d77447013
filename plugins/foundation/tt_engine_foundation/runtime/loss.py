"""Cross-entropy with a lean backward pass, for large vocabularies.

`F.cross_entropy` materialises log-softmax, a zero-filled gradient and a
log-softmax backward: several full passes over the (tokens × vocab) logits.
Here the forward keeps only log-sum-exp per row and the backward turns the
saved logits into softmax − one-hot in place: one pass, no extra buffer. The
logits must not be needed by anything else after the loss (true for the GPT's
lm_head output). Targets equal to `ignore_index` contribute nothing; the mean
is over the other targets, as in `F.cross_entropy`.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable


class _LeanCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: torch.Tensor, targets: torch.Tensor, ignore_index: int) -> torch.Tensor:
        valid = targets != ignore_index
        safe = torch.where(valid, targets, torch.zeros_like(targets))
        lse = torch.logsumexp(logits, dim=-1)
        picked = logits.gather(1, safe[:, None]).squeeze(1)
        count = valid.sum().clamp(min=1)
        loss = ((lse - picked) * valid).sum() / count
        ctx.save_for_backward(logits, lse, safe, valid, count)
        return loss

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor):
        logits, lse, safe, valid, count = ctx.saved_tensors
        g = logits.sub_(lse[:, None]).exp_()  # softmax, in place
        g.scatter_add_(1, safe[:, None], -torch.ones_like(lse[:, None]))
        g.mul_((valid.to(g.dtype) * (grad / count))[:, None])
        return g, None, None


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor, ignore_index: int = -100) -> torch.Tensor:
    """Mean cross-entropy of (N, V) float logits against (N,) targets."""
    if not logits.requires_grad:
        return torch.nn.functional.cross_entropy(logits, targets, ignore_index=ignore_index)
    return _LeanCrossEntropy.apply(logits, targets, ignore_index)
