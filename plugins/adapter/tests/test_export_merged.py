"""`python -m tt_engine_adapter.stages.export`: LoRA merged into full-precision weights, refusals for unsafe bases."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import torch

from tt_engine_adapter.formats import fingerprint
from tt_engine_adapter.runtime import manifest
from tt_engine_adapter.runtime.manifest import verify_manifest

SYSTEM = "Classify the sentiment of the movie review."


def make_adapter(base, folder, recorded_base=None):
    """An adapter folder as the train stage leaves it (PEFT files, tt-adapter.json, manifest).

    `recorded_base` is the base the adapter's records name (default: `base`)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(1)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    peft = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False))
    peft.save_pretrained(str(folder))
    recorded_base = recorded_base or base
    record = {"path": str(recorded_base), "name": str(recorded_base), "revision": None,
              "fingerprint": fingerprint.folder_fingerprint(recorded_base)}
    import hashlib

    sha = hashlib.sha256(SYSTEM.encode()).hexdigest()
    (folder / "tt-adapter.json").write_text(json.dumps({"format": 1, "base_model": record, "system_message": SYSTEM,
                                                        "system_message_sha256": sha}))
    manifest.write_manifest(folder, "adapter", record, sha)
    return folder


def run_export(tmp, adapter, out):
    request = tmp / f"request-{out.name}.json"
    request.write_text(json.dumps({"source": str(adapter), "out": str(out), "model_id": "tuned"}))
    return subprocess.run([sys.executable, "-m", "tt_engine_adapter.stages.export", str(request)], capture_output=True,
                          text=True, timeout=300)


@pytest.fixture
def base(tiny_qwen3):
    return tiny_qwen3  # read only: the tests that change a base change a copy


def test_merged_model_equals_base_plus_adapter(base, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    adapter = make_adapter(base, tmp_path / "adapter")
    proc = run_export(tmp_path, adapter, tmp_path / "merged")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = tmp_path / "merged"
    assert verify_manifest(out) == []
    info = json.loads((out / "tt-export.json").read_text())
    assert info["kind"] == "merged" and info["system_message"] == SYSTEM and info["dtype"] == "float32"
    assert not (out / "adapter_config.json").exists()

    merged = AutoModelForCausalLM.from_pretrained(out, trust_remote_code=False).eval()
    assert all(p.dtype == torch.float32 for p in merged.parameters())
    reference = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32),
                                          str(adapter)).eval()
    plain = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32).eval()
    ids = torch.randint(0, merged.config.vocab_size, (3, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want, got, before = reference(ids).logits, merged(ids).logits, plain(ids).logits
    assert (want - got).abs().max().item() < 1e-4
    assert (want - before).abs().max().item() > 1e-3  # the adapter really changed the model
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                         add_generation_prompt=True)


def test_quantized_or_changed_base_is_refused_and_nothing_written(base, tmp_path):
    quantized = tmp_path / "quantized-base"
    shutil.copytree(base, quantized)
    config = json.loads((quantized / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "bitsandbytes", "load_in_4bit": True}
    (quantized / "config.json").write_text(json.dumps(config))
    adapter = make_adapter(base, tmp_path / "adapter-q", recorded_base=quantized)
    proc = run_export(tmp_path, adapter, tmp_path / "out-q")
    assert proc.returncode == 2 and "quantized" in proc.stdout
    assert not (tmp_path / "out-q").exists()

    changed = tmp_path / "changed-base"
    shutil.copytree(base, changed)
    adapter = make_adapter(changed, tmp_path / "adapter-c")
    (changed / "generation_config.json").write_text("{}")
    proc = run_export(tmp_path, adapter, tmp_path / "out-c")
    assert proc.returncode == 2 and "changed since the adapter was trained" in proc.stdout
    assert not (tmp_path / "out-c").exists()

    (tmp_path / "taken").mkdir()
    proc = run_export(tmp_path, make_adapter(base, tmp_path / "adapter-t"), tmp_path / "taken")
    assert proc.returncode == 2 and "already exists" in proc.stdout
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())
