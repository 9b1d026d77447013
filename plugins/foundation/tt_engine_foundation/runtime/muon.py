"""Muon as `torch.optim.Muon` defines it, with the orthogonalisation in float32 off CUDA.

`torch.optim.Muon` runs its Newton-Schulz iteration in bfloat16 everywhere. CPUs without bfloat16 matrix
units (most of them) multiply bfloat16 matrices 2-3x slower than float32 ones, and the rounding lets
rank-deficient directions grow from noise, so this subclass keeps torch's parameter groups, defaults,
checks, state (`momentum_buffer`) and update rule and changes one thing: the iteration's dtype, bfloat16
on CUDA (where it is fast) and float32 elsewhere. Its state dict is torch.optim.Muon's.

One step, per matrix W with gradient G (momentum mu, rate lr, decay wd):
    B <- mu B + (1 - mu) G;   U <- (1 - mu) G + mu B (Nesterov) or B
    O <- 5 quintic Newton-Schulz steps on U / |U|_F (transposed when W is tall)
    W <- W (1 - lr wd) - lr sqrt(max(1, rows / cols)) O
"""

from __future__ import annotations

import math

import torch


def orthogonalise(update: torch.Tensor, coefficients: tuple[float, float, float], steps: int,
                  eps: float) -> torch.Tensor:
    """U S' V^T for U S V^T = update, S' near 1 (the quintic pushes every singular value into ~[0.7, 1.2])."""
    dtype = torch.bfloat16 if update.is_cuda else torch.float32
    x = update.to(dtype)
    tall = x.size(0) > x.size(1)
    if tall:
        x = x.T.contiguous()
    x = x / x.norm().clamp(min=eps)
    a, b, c = coefficients
    for _ in range(steps):
        gram = x @ x.T
        poly = torch.addmm(gram, gram, gram, beta=b, alpha=c)
        x = torch.addmm(x, poly, x, beta=a)
    return x.T if tall else x


class Muon(torch.optim.Muon):
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
            for param, grad, buf in zip(params, grads, buffers):
                buf.lerp_(grad, 1 - mu)
                update = grad.lerp(buf, mu) if group["nesterov"] else buf
                ortho = orthogonalise(update, group["ns_coefficients"], group["ns_steps"], group["eps"])
                rows, cols = param.shape
                param.mul_(1 - lr * wd)
                param.add_(ortho.to(param.dtype), alpha=-lr * math.sqrt(max(1.0, rows / cols)))
        return loss
