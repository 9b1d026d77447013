"""Which device a stage computes on: `auto` picks the best available (cuda, then mps, then cpu).

torch is imported inside the function: the engines bring it.
"""

from __future__ import annotations

from typing import Optional

from tt_stagekit.contract import InvalidInput

DEVICES = ("cpu", "cuda", "mps")


def pick_device(wanted: Optional[str]) -> str:
    """`cpu`, `cuda` or `mps` for a requested device; InvalidInput names what is missing."""
    import torch

    wanted = wanted or "auto"
    mps = getattr(torch.backends, "mps", None)
    mps_available = bool(mps is not None and mps.is_available())
    if wanted == "auto":
        if torch.cuda.is_available():
            return "cuda"
        return "mps" if mps_available else "cpu"
    if wanted not in DEVICES:
        raise InvalidInput(f"device {wanted!r} is not one of auto, {', '.join(DEVICES)}")
    if wanted == "cuda" and not torch.cuda.is_available():
        raise InvalidInput("device 'cuda' was asked for but torch sees no CUDA device; run `tt doctor` or use --device cpu")
    if wanted == "mps" and not mps_available:
        raise InvalidInput("device 'mps' was asked for but torch sees no MPS device; use --device cpu")
    return wanted
