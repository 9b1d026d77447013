"""bitsandbytes is never imported where it cannot be used (runtime/bitsandbytes_gate.py): on a machine without a
GPU a stage or the server imports PEFT and transformers, builds a LoRA model, and bitsandbytes stays out of the
process (no import, no kernels warning). Real interpreter processes in the engine's environment."""

from __future__ import annotations

import os
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
WITHOUT_A_GPU = pytest.mark.skipif(bitsandbytes_gate.usable(),
                                   reason="this machine has a GPU: bitsandbytes is usable here")


def _child(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env})


@WITHOUT_A_GPU
@pytest.mark.parametrize("package", ["tt_engine_adapter.stages", "tt_engine_adapter.serve"])
def test_without_a_gpu_bitsandbytes_is_never_imported(package):
    done = _child(CHILD.format(package=package))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "bitsandbytes: NoneType False PeftModelForCausalLM" in done.stdout, done.stdout + done.stderr[-2000:]
    assert "kernels" not in done.stderr, done.stderr[-2000:]


@WITHOUT_A_GPU
def test_tt_bitsandbytes_1_keeps_it_importable_where_no_device_node_shows_a_gpu():
    done = _child(CHILD.format(package="tt_engine_adapter.stages"), TT_BITSANDBYTES="1")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "bitsandbytes: module True PeftModelForCausalLM" in done.stdout, done.stdout + done.stderr[-2000:]


@WITHOUT_A_GPU
def test_a_qlora_stage_that_finds_it_left_out_on_cuda_names_the_variable_that_keeps_it():
    """torch sees CUDA where no device node the gate knows exists: the 4-bit load fails naming what to set, not
    with transformers' 'requires bitsandbytes' under a model-loading error."""
    done = _child("import tt_engine_adapter.stages, torch\n"
                  "from tt_engine_adapter.runtime import model_source\n"
                  "from tt_stagekit.protocol import StageError\n"
                  "try:\n    model_source.quantization('cuda', torch.float16)\n"
                  "except StageError as exc:\n    print('refused:', exc)\n")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "refused: hyperparameters.load_in_4bit: bitsandbytes was left out" in done.stdout, done.stdout
    assert "/dev/dxg" in done.stdout and "TT_BITSANDBYTES=1" in done.stdout


@pytest.mark.parametrize("node", ["/dev/nvidiactl", "/dev/kfd", "/dev/dxg"])
def test_any_one_gpu_device_node_keeps_bitsandbytes(monkeypatch, node):
    """NVIDIA's control node, ROCm's /dev/kfd, or WSL2's /dev/dxg alone: the gate leaves bitsandbytes be."""
    monkeypatch.delenv(bitsandbytes_gate.FORCE_ENV, raising=False)
    seen = {}
    for machine in ({node}, set()):  # (os.path.exists answers for this machine only while usable() asks)
        with monkeypatch.context() as patch:
            patch.setattr(bitsandbytes_gate.os.path, "exists", lambda path: path in machine)
            seen[bool(machine)] = bitsandbytes_gate.usable()
    assert seen == {True: True, False: False}
