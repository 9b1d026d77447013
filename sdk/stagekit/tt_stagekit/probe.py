"""`python -m tt_stagekit.probe DEVICE`: what torch in this environment can compute on, as one JSON line.

Run by `tt doctor` inside an engine's environment (a short subprocess), so the
answer is the one the stages will get: torch and its CUDA build, whether the
requested device works (a tiny matmul on it), the GPU's name, compute
capability, memory and bf16 support, the driver's CUDA version and (through
nvidia-smi, when present) the driver version.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from tt_stagekit.gpus import nvidia_gpus


def _driver_version() -> str | None:
    gpus = nvidia_gpus()
    return gpus[0].driver_version or None if gpus else None


def probe(wanted: str) -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {"torch": torch.__version__, "torch_cuda": torch.version.cuda, "wanted": wanted,
                            "cuda_available": bool(torch.cuda.is_available())}
    mps = getattr(torch.backends, "mps", None)
    info["mps_available"] = bool(mps is not None and mps.is_available())
    if wanted in ("cuda", "auto"):
        info["driver_version"] = _driver_version()
        get_driver = getattr(torch._C, "_cuda_getDriverVersion", None)
        try:
            number = int(get_driver()) if get_driver is not None else 0
            info["driver_cuda"] = f"{number // 1000}.{number % 1000 // 10}" if number else None
        except Exception:  # no driver at all
            info["driver_cuda"] = None
    if info["cuda_available"]:
        props = torch.cuda.get_device_properties(0)
        info.update(device_count=torch.cuda.device_count(), gpu=props.name,
                    capability=f"{props.major}.{props.minor}", memory_gb=round(props.total_memory / 1e9, 1),
                    bf16=bool(torch.cuda.is_bf16_supported()))
    device = wanted
    if wanted == "auto":
        device = "cuda" if info["cuda_available"] else ("mps" if info["mps_available"] else "cpu")
    info["device"] = device
    try:
        x = torch.ones(8, 8, device=device)
        info["works"] = float((x @ x).sum().item()) == 512.0
    except Exception as exc:  # the error torch gives is the useful part
        info["works"] = False
        info["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:400]
    return info


def main() -> None:
    wanted = sys.argv[1] if len(sys.argv) > 1 else "auto"
    sys.stdout.write(json.dumps(probe(wanted)) + "\n")


if __name__ == "__main__":
    main()
