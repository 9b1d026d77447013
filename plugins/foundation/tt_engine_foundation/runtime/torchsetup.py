"""Per-process torch settings for a stage: threads, denormals, the device and the autocast dtype.

`open_stage` is how every stage that loads a model starts: these settings, its device and the run's tokenizer.
"""

from __future__ import annotations

import os
from typing import Any, Optional

from tt_stagekit.devices import pick_device

from tt_engine_foundation.runtime.config import FoundationSettings, FoundationRequest


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


def autocast_dtype(cfg: FoundationSettings, device) -> Optional["torch.dtype"]:  # noqa: F821
    import torch

    return torch.bfloat16 if cfg.bf16 and device.type == "cuda" else None


def open_stage(request: FoundationRequest, distributed: bool = False) -> tuple[Any, Any]:
    """The start of a stage that loads a model: threads and denormals, then its torch.device (`--device`, else
    `foundation.device`) and the run's tokenizer. `distributed` (pretrain, SFT): under torchrun the rank first
    joins the process group and gets its own device (`tt_stagekit.distributed.init`)."""
    from tt_engine_foundation.runtime.tokenizer import load_run_tokenizer

    setup_threads()
    device = torch_device(request.device_choice)
    if distributed:
        import tt_stagekit.distributed

        device = tt_stagekit.distributed.init(device)
    return device, load_run_tokenizer(request.layout.tokenizer_json)
