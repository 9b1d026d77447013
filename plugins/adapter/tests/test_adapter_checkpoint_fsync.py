"""The LoRA training checkpoints and the best adapter are durable, seen in the system calls (strace).

A real process saves two checkpoints (the first rolled away, `keep=1`) and the best adapter twice (the second
replacing the first) of a PEFT model on the session's tiny Llama, traced; tt_stagekit.fsync_trace then checks that
each folder was renamed into place only after every file in it was fsynced, and its parent fsynced after.
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from tt_stagekit.fsync_trace import command, events, undurable

SAVES = '''
import sys
from pathlib import Path
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM
from tt_engine_adapter.runtime import checkpoint
base, root = sys.argv[1], Path(sys.argv[2])
torch.manual_seed(1)
model = get_peft_model(AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32),
                       LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
for step in (1, 2):
    model(torch.tensor([[1, 2, 3]]), labels=torch.tensor([[1, 2, 3]])).loss.backward()
    optimizer.step()
    checkpoint.save(root / "checkpoints", step, model, optimizer, {"fingerprint": "f"}, keep=1)
    checkpoint.save_best(root / "checkpoints", step, 1.0 / step, model)
'''


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace (Debian: apt-get install strace)")
def test_checkpoints_and_the_best_adapter_are_fsynced_before_and_after_their_rename(tiny_llama, tmp_path):
    root, log = tmp_path / "train", tmp_path / "strace.log"
    proc = subprocess.run([*command(log), sys.executable, "-c", SAVES, str(tiny_llama), str(root)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    published = {e[2].rsplit("/", 1)[-1] for e in events(log.read_text(errors="replace")) if e[0] == "rename"}
    assert {"step-000000001", "step-000000002", "best"} <= published, published
    assert sorted(p.name for p in (root / "checkpoints").iterdir()) == ["best", "step-000000002"]
    assert undurable(log, root) == []
