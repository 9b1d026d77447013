"""bitsandbytes stays unimported where it cannot be used. Engine environment; stdlib only.

tt uses bitsandbytes for one thing, the 4-bit base of QLoRA (`hyperparameters.load_in_4bit`), which needs a CUDA
device (the spec refuses it elsewhere). PEFT and transformers import it whenever it is installed, which on a
machine without a GPU cost 0.9-2.7 s of every stage's start and printed a kernels warning. `hide_where_unusable()`
(called by the stages and serve packages before anything imports PEFT) marks it absent in `sys.modules` when the
machine has no NVIDIA or ROCm device node: `importlib.util.find_spec` then answers None, so both libraries take
it as not installed, and `import bitsandbytes` raises ImportError, which PEFT's helpers catch.
"""

from __future__ import annotations

import os
import sys

DEVICE_NODES = ("/dev/nvidiactl", "/dev/kfd")  # the CUDA driver's control node; ROCm's kernel driver


def usable() -> bool:
    """Whether this machine has a GPU whose driver bitsandbytes' 4-bit kernels could use."""
    return any(os.path.exists(node) for node in DEVICE_NODES)


def hide_where_unusable() -> bool:
    """Mark bitsandbytes absent when it cannot be used and nothing imported it yet; True when marked."""
    if usable() or "bitsandbytes" in sys.modules:
        return False
    sys.modules["bitsandbytes"] = None  # type: ignore[assignment]
    return True
