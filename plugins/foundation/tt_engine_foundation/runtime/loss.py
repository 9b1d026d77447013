"""Cross-entropy for large vocabularies that computes its gradient during the forward pass.

`F.cross_entropy` materialises log-softmax, a zero-filled gradient and a
log-softmax backward: several full passes over the (tokens × vocab) logits,
each one a trip through main memory (4096 × 32768 fp32 logits are 512 MB).
Here the logits are walked once, in row chunks small enough to stay in the
CPU's cache: per chunk, log-sum-exp, the picked logit, then softmax − one-hot
scaled by 1/count written in place. The backward pass only multiplies by the
upstream gradient (skipped when it is 1 on the CPU). On CUDA the chunk is the
whole tensor (kernel launches cost more than memory traffic there).

The logits are overwritten: they must not be needed by anything else after
the loss (true for the GPT's lm_head output, whose matmul backward needs only
its inputs). Targets equal to `ignore_index` contribute nothing; the mean is
over the other targets, as in `F.cross_entropy`.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

CPU_CHUNK_BYTES = 2 << 20  # about one core's L2


def _chunk_rows(logits: torch.Tensor) -> int:
    if logits.device.type != "cpu":
        return max(1, logits.shape[0])
    return max(1, CPU_CHUNK_BYTES // max(1, logits.shape[1] * logits.element_size()))


class _FusedCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: torch.Tensor, targets: torch.Tensor, ignore_index: int) -> torch.Tensor:
        valid = targets != ignore_index
        safe = torch.where(valid, targets, torch.zeros_like(targets))
        scale = valid.to(logits.dtype) / valid.sum().clamp(min=1)
        chunk = _chunk_rows(logits)
        parts = []
        for start in range(0, logits.shape[0], chunk):
            rows, picked_at = logits[start:start + chunk], safe[start:start + chunk, None]
            row_scale = scale[start:start + chunk]
            lse = torch.logsumexp(rows, dim=-1)
            parts.append(((lse - rows.gather(1, picked_at).squeeze(1)) * row_scale).sum())
            rows.sub_(lse[:, None]).exp_()  # softmax, in place
            rows.scatter_add_(1, picked_at, torch.full_like(lse[:, None], -1.0))
            rows.mul_(row_scale[:, None])  # d(mean loss)/d(logits)
        ctx.save_for_backward(logits)
        return torch.stack(parts).sum()

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor):
        (gradient,) = ctx.saved_tensors
        if gradient.device.type != "cpu" or float(grad) != 1.0:
            gradient.mul_(grad)
        return gradient, None, None


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor, ignore_index: int = -100) -> torch.Tensor:
    """Mean cross-entropy of (N, V) float logits against (N,) targets; overwrites logits when training."""
    if not logits.requires_grad:
        return torch.nn.functional.cross_entropy(logits, targets, ignore_index=ignore_index)
    return _FusedCrossEntropy.apply(logits, targets, ignore_index)
