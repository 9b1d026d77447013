"""An adapter saved twice is the same bytes: PEFT writes adapter_config.json's `target_modules` (a set) in string-hash
order, which differs between processes; `adapter_out.save_weights` sorts it (runtime/adapter_out.py). Two real
processes with other hash seeds save the same adapter of the session's tiny Llama."""

from __future__ import annotations

import json
import os
import subprocess
import sys

SAVE = '''
import sys
from pathlib import Path
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM
from tt_engine_adapter.runtime.adapter_out import save_weights
torch.manual_seed(3)
model = get_peft_model(AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32),
                       LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
save_weights(model, Path(sys.argv[2]))
'''


def test_the_same_adapter_saved_by_processes_with_other_hash_seeds_is_the_same_bytes(tiny_llama, tmp_path):
    folders = []
    for seed in ("1", "2"):
        folder = tmp_path / f"seed-{seed}"
        proc = subprocess.run([sys.executable, "-c", SAVE, str(tiny_llama), str(folder)], capture_output=True,
                              text=True, timeout=600, env=dict(os.environ, PYTHONHASHSEED=seed))
        assert proc.returncode == 0, proc.stderr[-2000:]
        folders.append(folder)
    configs = [(f / "adapter_config.json").read_bytes() for f in folders]
    targets = json.loads(configs[0])["target_modules"]
    assert len(targets) == 14 and targets == sorted(targets)  # every linear layer of the 2-layer model
    assert configs[0] == configs[1]
    weights = [(f / "adapter_model.safetensors").read_bytes() for f in folders]
    assert weights[0] == weights[1]
