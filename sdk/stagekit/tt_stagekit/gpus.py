"""NVIDIA GPU inspection through `nvidia-smi`, without torch (for doctor checks and probes). Stdlib only.

`nvidia_gpus()` lists the GPUs this process may use (name, compute capability, driver version), trimmed
to CUDA_VISIBLE_DEVICES when that is set; None when nvidia-smi is missing or fails.
`first_gpu_memory_bytes()` is the first GPU's total memory (for memory estimates). The engines' doctor
checks and `tt_stagekit.probe` read GPUs only through it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Optional

TIMEOUT_SECONDS = 20


@dataclass(frozen=True)
class Gpu:
    name: str
    compute_cap: str  # "9.0"; "" when the driver is too old to report it
    driver_version: str


def _nvidia_smi(*args: str) -> Optional[list[str]]:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, *args], capture_output=True, text=True, timeout=TIMEOUT_SECONDS)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip().splitlines() if out.returncode == 0 else None


def _visible(gpus: list[Gpu]) -> list[Gpu]:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return gpus
    return gpus[:len([v for v in visible.split(",") if v.strip() and v.strip() != "-1"])]


def nvidia_gpus() -> Optional[list[Gpu]]:
    """The visible NVIDIA GPUs, or None when nvidia-smi is missing or fails."""
    lines = _nvidia_smi("--query-gpu=name,compute_cap,driver_version", "--format=csv,noheader")
    gpus = [Gpu(*[part.strip() for part in line.split(",")]) for line in lines or [] if line.count(",") == 2]
    if gpus or lines == []:
        return _visible(gpus)
    listed = _nvidia_smi("-L")  # drivers older than compute_cap in --query-gpu
    if listed is None:
        return None
    names = [line.split(":", 1)[1].split("(UUID")[0].strip() for line in listed if line.startswith("GPU ") and ":" in line]
    return _visible([Gpu(name, "", "") for name in names])


def first_gpu_memory_bytes() -> Optional[int]:
    """Total memory of the first NVIDIA GPU in bytes, or None without one (or when nvidia-smi fails)."""
    lines = _nvidia_smi("--query-gpu=memory.total", "--format=csv,noheader,nounits")
    try:
        return int(float(lines[0].strip())) * 1024 * 1024 if lines else None
    except ValueError:
        return None
