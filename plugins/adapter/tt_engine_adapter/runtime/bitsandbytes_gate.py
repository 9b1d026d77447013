"""bitsandbytes stays unimported where it cannot be used. Engine environment; stdlib only.

tt uses bitsandbytes for one thing, the 4-bit base of QLoRA (`hyperparameters.load_in_4bit`), which needs a CUDA
device (the spec refuses it elsewhere). PEFT and transformers import it whenever it is installed, which on a
machine without a GPU cost 0.85 s of every stage's start (bench/stage_imports.py) and printed a kernels warning.
`hide_where_unusable()` (called by the stages and serve packages before anything imports PEFT) marks it absent in
`sys.modules` when the machine has no GPU device node: `importlib.util.find_spec` then answers None, so both
libraries take it as not installed, and `import bitsandbytes` raises ImportError, which PEFT's helpers catch.
`TT_BITSANDBYTES=1` keeps it importable whatever the device nodes say (a GPU this check does not know); a QLoRA
stage that finds it hidden on CUDA fails naming that variable (`model_source.quantization`).
"""

from __future__ import annotations

import os
import sys

# The CUDA driver's control node, ROCm's kernel driver, and WSL2's GPU paravirtualization (CUDA on Windows' driver)
DEVICE_NODES = ("/dev/nvidiactl", "/dev/kfd", "/dev/dxg")
FORCE_ENV = "TT_BITSANDBYTES"


def usable() -> bool:
    """Whether this machine has a GPU whose driver bitsandbytes' 4-bit kernels could use (or the user says so)."""
    return os.environ.get(FORCE_ENV) == "1" or any(os.path.exists(node) for node in DEVICE_NODES)


def hide_where_unusable() -> bool:
    """Mark bitsandbytes absent when it cannot be used and nothing imported it yet; True when marked."""
    if usable() or "bitsandbytes" in sys.modules:
        return False
    sys.modules["bitsandbytes"] = None  # type: ignore[assignment]
    return True


def hidden() -> bool:
    """Whether this process marked bitsandbytes absent (`hide_where_unusable`)."""
    return "bitsandbytes" in sys.modules and sys.modules["bitsandbytes"] is None
