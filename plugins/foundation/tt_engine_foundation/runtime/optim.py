"""The optimizers: AdamW alone, or Muon for the hidden matrices with AdamW for the rest.

`build_adamw` is the AdamW everywhere that SFT, RL and `foundation.optimizer: "adamw"` pretraining use.
`build_muon_adamw` is pretraining's default: Muon (`runtime.muon`, torch.optim.Muon with its iteration in
float32 off CUDA; momentum orthogonalised by Newton-Schulz)
on every 2-D matrix inside the decoder layers, AdamW on the token embedding, the output head and the norm
weights, with the rates of `runtime.hyperparams`. Both optimizers sit behind one `MuonAdamW` object with
the `torch.optim.Optimizer` surface the loop and the checkpoint use (`param_groups`, `step`, `zero_grad`,
`state_dict`, `load_state_dict`); each group keeps its own base rate in `"base_lr"`, which the schedule
multiplies (`runtime.schedule.apply`).
"""

from __future__ import annotations

from typing import Any

import torch

from tt_engine_foundation.runtime.hyperparams import MuonRates
from tt_engine_foundation.runtime.muon import Muon


def build_adamw(model: torch.nn.Module, lr: float, weight_decay: float, device) -> torch.optim.AdamW:
    """Weight decay on 2-D weights except the embedding; none on norms."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (decay if p.ndim >= 2 and "embed_tokens" not in name else no_decay).append(p)
    groups = [
        {"params": decay, "weight_decay": weight_decay, "base_lr": lr},
        {"params": no_decay, "weight_decay": 0.0, "base_lr": lr},
    ]
    fused = device.type == "cuda"
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8, fused=fused)


def is_hidden_matrix(name: str, p: torch.Tensor) -> bool:
    """A 2-D weight inside a decoder layer (attention and MLP projections): the parameters Muon trains."""
    return p.ndim == 2 and name.startswith("model.layers.")


def build_muon_adamw(model: torch.nn.Module, rates: MuonRates, device, ns_bf16: bool = False) -> "MuonAdamW":
    """`ns_bf16`: Muon's iteration in bf16 on the CPU too (it always is on CUDA), for steps computed in bf16."""
    matrices, embedding, head, norms = [], [], [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        if is_hidden_matrix(name, p):
            matrices.append(p)
        elif name == "model.embed_tokens.weight":
            embedding.append(p)
        elif name == "lm_head.weight":
            head.append(p)
        else:
            norms.append(p)
    muon = Muon(
        [{"params": matrices, "lr": rates.matrix_lr, "base_lr": rates.matrix_lr,
          "base_weight_decay": rates.matrix_weight_decay}],
        lr=rates.matrix_lr, weight_decay=rates.matrix_weight_decay, momentum=rates.momentum_end, nesterov=True,
        iteration_bf16=ns_bf16,
    )
    adam_groups = [
        {"params": embedding, "lr": rates.embedding_lr, "base_lr": rates.embedding_lr, "weight_decay": 0.0,
         "betas": rates.embedding_betas},
        {"params": head, "lr": rates.head_lr, "base_lr": rates.head_lr, "weight_decay": 0.0, "betas": rates.head_betas},
        {"params": norms, "lr": rates.norm_lr, "base_lr": rates.norm_lr, "weight_decay": 0.0},
    ]
    adamw = torch.optim.AdamW([g for g in adam_groups if g["params"]], betas=rates.adam_betas, eps=1e-10,
                              fused=device.type == "cuda")
    return MuonAdamW(muon, adamw, (rates.momentum_start, rates.momentum_end))


class MuonAdamW:
    """Muon and AdamW stepped together; one state dict `{"muon": ..., "adamw": ...}` of tensors and plain data
    (what `torch.save` / `weights_only` loading and the checkpoint's staging buffers handle).
    `momentum_range` is Muon's momentum warm-up, start to end (`runtime.schedule.apply` reads it)."""

    def __init__(self, muon: Muon, adamw: torch.optim.AdamW, momentum_range: tuple[float, float]) -> None:
        self.muon, self.adamw, self.momentum_range = muon, adamw, momentum_range

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.muon.param_groups + self.adamw.param_groups

    def step(self) -> None:
        self.muon.step()
        self.adamw.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.muon.zero_grad(set_to_none=set_to_none)
        self.adamw.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict[str, Any]:
        return {"muon": self.muon.state_dict(), "adamw": self.adamw.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if set(state) != {"muon", "adamw"}:
            raise ValueError(f"optimizer state holds {sorted(state)}, not a Muon + AdamW state (muon, adamw)")
        self.muon.load_state_dict(state["muon"])
        self.adamw.load_state_dict(state["adamw"])


def set_lr(optimizer, lr: float) -> None:
    """One rate for every group (SFT and RL, whose AdamW has a single base rate)."""
    for group in optimizer.param_groups:
        group["lr"] = lr
