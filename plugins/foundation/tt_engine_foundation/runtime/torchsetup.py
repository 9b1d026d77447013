"""Per-process torch settings for a stage: threads, denormals, the device and the autocast dtypes.

Two autocast rules: `autocast_dtype` (scoring, generation, RL) is bf16 on CUDA with `foundation.bf16`;
`training_autocast_dtype` (pretraining and SFT steps) adds bf16 on a CPU with `foundation.cpu_bf16`, which a
CPU without native bf16 matrix units refuses (`check_cpu_bf16`).

`open_stage` is how every stage that loads a model starts: these settings, its device and the run's tokenizer.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Optional

from tt_stagekit.devices import pick_device
from tt_stagekit.protocol import StageError

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


def cpu_has_native_bf16() -> bool:
    """AMX tiles or AVX-512 BF16: the CPUs whose oneDNN matrix products in bf16 beat float32."""
    import torch

    return bool(torch.cpu._is_amx_tile_supported() or torch.cpu._is_avx512_bf16_supported())


def check_cpu_bf16(cfg: FoundationSettings, device) -> None:
    """Refuse `foundation.cpu_bf16` on a CPU that would run it slower than float32."""
    if cfg.cpu_bf16 and device.type == "cpu" and not cpu_has_native_bf16():
        raise StageError("foundation.cpu_bf16: this CPU has no native bf16 matrix unit (AMX or AVX-512 BF16), so "
                         "bf16 would train slower than float32; set foundation.cpu_bf16 to false")


def training_autocast_dtype(cfg: FoundationSettings, device) -> Optional["torch.dtype"]:  # noqa: F821
    """The autocast dtype of pretraining and SFT steps: bf16 on CUDA (`bf16`) and on a CPU (`cpu_bf16`)."""
    import torch

    check_cpu_bf16(cfg, device)
    if device.type == "cpu" and cfg.cpu_bf16:
        return torch.bfloat16
    return autocast_dtype(cfg, device)


def autocast(dtype: Optional["torch.dtype"], device):  # noqa: F821
    """torch.autocast on `device` in `dtype`, or nothing when `dtype` is None."""
    import torch

    return torch.autocast(device_type=device.type, dtype=dtype) if dtype is not None else contextlib.nullcontext()


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
