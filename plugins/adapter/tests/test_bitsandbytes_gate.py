"""bitsandbytes is never imported where it cannot be used (runtime/bitsandbytes_gate.py): on a machine without a
GPU a stage or the server imports PEFT and transformers, builds a LoRA model, and bitsandbytes stays out of the
process (no import, no kernels warning). Real interpreter processes in the engine's environment."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tt_engine_adapter.runtime import bitsandbytes_gate

CHILD = """
import sys, warnings
import {package}
import peft, transformers
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM
model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                     num_attention_heads=2, num_key_value_heads=2))
lora = get_peft_model(model, LoraConfig(r=2, target_modules="all-linear", task_type="CAUSAL_LM"))
print("bitsandbytes:", type(sys.modules.get("bitsandbytes")).__name__, transformers.utils.is_bitsandbytes_available(),
      type(lora).__name__)
"""


@pytest.mark.skipif(bitsandbytes_gate.usable(), reason="this machine has a GPU: bitsandbytes is usable here")
@pytest.mark.parametrize("package", ["tt_engine_adapter.stages", "tt_engine_adapter.serve"])
def test_without_a_gpu_bitsandbytes_is_never_imported(package):
    done = subprocess.run([sys.executable, "-P", "-c", CHILD.format(package=package)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "bitsandbytes: NoneType False PeftModelForCausalLM" in done.stdout, done.stdout + done.stderr[-2000:]
    assert "kernels" not in done.stderr, done.stderr[-2000:]
