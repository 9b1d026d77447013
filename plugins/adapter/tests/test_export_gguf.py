"""`python -m tt_engine_adapter.stages.export_gguf`: a LoRA adapter merged and written as GGUF / Ollama.

What `gguf`'s reader finds (architecture, shapes, the chat template byte-equal to the merged Hugging Face
export's, end-of-turn token, provenance), for a Llama-style and a Qwen3-style tiny base.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import gguf
import pytest
from safetensors.numpy import load_file

from test_export_merged import SYSTEM, make_adapter


def run(module: str, request: dict, path) -> subprocess.CompletedProcess:
    path.write_text(json.dumps(request))
    return subprocess.run([sys.executable, "-P", "-m", module, str(path)], capture_output=True, text=True, timeout=900)


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_merged_adapter_exports_to_gguf_and_ollama(arch, tiny_llama, tiny_qwen3, tmp_path):
    base = {"llama": tiny_llama, "qwen3": tiny_qwen3}[arch]
    adapter = make_adapter(base, tmp_path / "adapter")
    request = {"source": str(adapter), "model_id": "tuned", "system_message": SYSTEM,
               "system_message_sha256": hashlib.sha256(SYSTEM.encode()).hexdigest()}
    proc = run("tt_engine_adapter.stages.export", {**request, "out": str(tmp_path / "hf")}, tmp_path / "hf.json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = run("tt_engine_adapter.stages.export_gguf", {**request, "out": str(tmp_path / "ollama"), "format": "ollama",
                                                        "quant": "f16"}, tmp_path / "ollama.json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out, hf = tmp_path / "ollama", tmp_path / "hf"
    assert sorted(p.name for p in out.iterdir()) == ["Modelfile", "artifact-manifest.json", "model.gguf",
                                                      "tt-export.json"]
    reader = gguf.GGUFReader(str(out / "model.gguf"))
    value = lambda key: reader.get_field(key).contents()
    config = json.loads((hf / "config.json").read_text())
    template_file = hf / "chat_template.jinja"
    template = (template_file.read_text() if template_file.is_file()
                else json.loads((hf / "tokenizer_config.json").read_text())["chat_template"])
    assert value("general.architecture") == arch
    assert value("tokenizer.chat_template").encode() == template.encode()
    assert value("tokenizer.ggml.pre") == "gpt-2"  # the tiny bases' ByteLevel split
    assert value(f"{arch}.block_count") == config["num_hidden_layers"]
    assert value(f"{arch}.attention.head_count") == config["num_attention_heads"]
    assert value("tt.system_message") == SYSTEM
    manifest = (adapter / "artifact-manifest.json").read_bytes()
    assert value("tt.source.manifest_sha256") == hashlib.sha256(manifest).hexdigest()
    tokens = value("tokenizer.ggml.tokens")
    eot = {"llama": "<|eot_id|>", "qwen3": "<|im_end|>"}[arch]
    assert tokens[value("tokenizer.ggml.eos_token_id")] == eot
    state = load_file(str(next(hf.glob("*.safetensors"))))
    assert len(reader.tensors) == len(state)
    shapes = {t.name: tuple(int(n) for n in reversed(t.shape)) for t in reader.tensors}
    assert shapes["blk.1.ffn_down.weight"] == state["model.layers.1.mlp.down_proj.weight"].shape
    if arch == "qwen3":
        assert shapes["blk.0.attn_q_norm.weight"] == state["model.layers.0.self_attn.q_norm.weight"].shape
    text = (out / "Modelfile").read_text()
    assert f'PARAMETER stop "{eot}"' in text and f'SYSTEM """{SYSTEM}"""' in text
    assert "PARAMETER num_ctx 512" in text and text.endswith("PARAMETER temperature 0\n")  # the evaluation's greedy decoding


def test_a_bad_quant_is_refused_and_writes_nothing(tiny_qwen3, tmp_path):
    adapter = make_adapter(tiny_qwen3, tmp_path / "adapter")
    proc = run("tt_engine_adapter.stages.export_gguf", {"source": str(adapter), "out": str(tmp_path / "out"),
                                                        "model_id": "t", "format": "gguf", "quant": "q5_k"},
               tmp_path / "r.json")
    assert proc.returncode == 2 and "quant must be one of" in proc.stdout, proc.stdout + proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adapter", "r.json"]
