"""Muon as `torch.optim.Muon` defines it, with the orthogonalisation in float32 off CUDA.

`torch.optim.Muon` runs its Newton-Schulz iteration in bfloat16 everywhere. CPUs without bfloat16 matrix
units (most of them) multiply bfloat16 matrices 2-3x slower than float32 ones, and the rounding lets
rank-deficient directions grow from noise, so this subclass keeps torch's parameter groups, defaults,
checks, state (`momentum_buffer`) and update rule and changes two things: the iteration's dtype, bfloat16
on CUDA (where it is fast) and float32 elsewhere (bf16 on a CPU too where the steps compute in bf16,
`foundation.cpu_bf16`); and matrices of one shape are orthogonalised together,
as one batch of matrix products (a depth-4 model has 28 matrices in two shapes: 30 products per step
instead of 420). Its state dict is torch.optim.Muon's.

One step, per matrix W with gradient G (momentum mu, rate lr, decay wd):
    B <- mu B + (1 - mu) G;   U <- (1 - mu) G + mu B (Nesterov) or B
    O <- 5 quintic Newton-Schulz steps on U / |U|_F (transposed when W is tall)
    W <- W (1 - lr wd) - lr sqrt(max(1, rows / cols)) O
"""

from __future__ import annotations

import math

import torch


def orthogonalise(update: torch.Tensor, coefficients: tuple[float, float, float], steps: int,
                  eps: float, bf16: bool = False) -> torch.Tensor:
    """U S' V^T for U S V^T = update, S' near 1 (the quintic pushes every singular value into ~[0.7, 1.2]).

    `update` is one matrix (rows, cols) or a batch of them (n, rows, cols), each normalised and iterated on
    its own. In bf16 on CUDA, or where `bf16` says so; float32 otherwise."""
    dtype = torch.bfloat16 if update.is_cuda or bf16 else torch.float32
    single = update.ndim == 2
    x = update.to(dtype)
    if single:
        x = x.unsqueeze(0)
    tall = x.size(-2) > x.size(-1)
    if tall:
        x = x.mT.contiguous()
    x = x / x.norm(dim=(-2, -1), keepdim=True).clamp(min=eps)
    a, b, c = coefficients
    for _ in range(steps):
        gram = x @ x.mT
        poly = torch.baddbmm(gram, gram, gram, beta=b, alpha=c)
        x = torch.baddbmm(x, poly, x, beta=a)
    x = x.mT if tall else x
    return x[0] if single else x


class Muon(torch.optim.Muon):
    def __init__(self, params, *, iteration_bf16: bool = False, **options) -> None:
        """torch.optim.Muon's `options`; `iteration_bf16`: the Newton-Schulz iteration in bf16 off CUDA too
        (for steps computed in bf16 on the CPU)."""
        super().__init__(params, **options)
        self.iteration_bf16 = iteration_bf16

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params, grads, buffers = [], [], []
            self._init_group(group, params, grads, buffers)
            mu, lr, wd = group["momentum"], group["lr"], group["weight_decay"]
            by_shape: dict[tuple, list[int]] = {}
            for i, param in enumerate(params):
                by_shape.setdefault((tuple(param.shape), param.device, param.dtype), []).append(i)
            for (shape, _, _), members in by_shape.items():
                updates = []
                for i in members:
                    buffers[i].lerp_(grads[i], 1 - mu)
                    updates.append(grads[i].lerp(buffers[i], mu) if group["nesterov"] else buffers[i])
                ortho = orthogonalise(torch.stack(updates), group["ns_coefficients"], group["ns_steps"], group["eps"],
                                      self.iteration_bf16)
                rows, cols = shape
                scale = -lr * math.sqrt(max(1.0, rows / cols))
                for k, i in enumerate(members):
                    params[i].mul_(1 - lr * wd)
                    params[i].add_(ortho[k].to(params[i].dtype), alpha=scale)
        return loss
