"""Per-process torch settings for a stage: threads, denormals, the device and the autocast dtype."""

from __future__ import annotations

import os
from typing import Optional

from tt_stagekit.devices import pick_device

from tt_engine_foundation.runtime.config import FoundationConfig


def setup_threads() -> None:
    """Thread count (TT_NUM_THREADS) and flush-to-zero for denormals.

    Denormal floats (tiny Adam second moments, small activations) slow CPU math
    by an order of magnitude; flushing them is deterministic.
    """
    import torch

    torch.set_flush_denormal(True)
    value = os.environ.get("TT_NUM_THREADS")
    if value:
        torch.set_num_threads(max(1, int(value)))


def torch_device(requested: str):
    """`auto`, `cpu`, `cuda` or `mps` as a torch.device (auto: the best present)."""
    import torch

    return torch.device(pick_device(requested))


def autocast_dtype(cfg: FoundationConfig, device) -> Optional["torch.dtype"]:  # noqa: F821
    import torch

    return torch.bfloat16 if cfg.bf16 and device.type == "cuda" else None
