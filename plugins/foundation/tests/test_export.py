"""Export to Hugging Face: transformers loads the folder (no custom code) and agrees with tt exactly
(Llama; with foundation.qk_norm, Qwen3).

A tiny model is built with the runtime code (tokenizer trained here, random
non-trivial weights), saved as a stage would save it, and exported through the
real entry point `python -m tt_engine_foundation.stages.export REQUEST.json`.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest
import torch

from tt_engine_foundation.runtime import tokenizer as T
from tt_engine_foundation.runtime.chat import render, render_prompt
from tt_engine_foundation.runtime.generate import generate
from tt_engine_foundation.runtime.model import GPT, config_for_depth
from tt_engine_foundation.runtime.model_io import save_model_dir

os.environ.setdefault("HF_HUB_OFFLINE", "1")
SYSTEM = "You add two whole numbers.\n\nGuidelines:\n- Answer with the sum only."
TEXTS = [
    "What is 15 plus 37? The answer is 52.",
    "The quick brown fox jumps over the lazy dog.  Twice!\n\tTabs and\r\nnewlines.",
    "Ünïcödé: 日本語のテキスト, Ελληνικά, русский текст, العربية, हिन्दी 🎉🚀👩‍💻",
    "def add(a, b):\n    return a + b  # code\n\nprint(add(2, 3))\n",
    "   leading and trailing spaces   ",
]


def run_export(request: dict, path) -> subprocess.CompletedProcess:
    path.write_text(json.dumps(request))
    return subprocess.run([sys.executable, "-m", "tt_engine_foundation.stages.export", str(path)],
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("export")
    tok = T.train(TEXTS * 30, 420)
    tok.save(str(root / "tokenizer.json"))
    ids = {"bos_token_id": T.special_id(tok, T.BOS), "eos_token_id": T.special_id(tok, T.ASSISTANT_END),
           "pad_token_id": T.special_id(tok, T.PAD)}
    cfg = config_for_depth(2, 420, 96, **ids)
    model = GPT(cfg)
    model.init_weights(3)
    gen = torch.Generator().manual_seed(4)
    with torch.no_grad():  # the init zeroes residual projections; make every weight matter
        for name, p in model.named_parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.05)
    sha = hashlib.sha256(SYSTEM.encode()).hexdigest()
    source = save_model_dir(root / "sft" / "model", model, root / "tokenizer.json", "foundation-sft",
                            {"stage": "sft", "system_message_sha256": sha})
    out = root / "hf"
    proc = run_export({"source": str(source), "out": str(out), "model_id": "adder-sft", "system_message": SYSTEM,
                       "system_message_sha256": sha}, root / "request.json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {"root": root, "tok": tok, "model": model.eval(), "cfg": cfg, "out": out, "source": source}


@pytest.fixture(scope="module")
def exported_qk_norm(exported):
    """The same kind of model with foundation.qk_norm, exported through the entry point: a Qwen3 folder."""
    root, tok = exported["root"], exported["tok"]
    cfg = config_for_depth(2, 420, 96, qk_norm=True, **T.special_ids(tok))
    model = GPT(cfg)
    model.init_weights(5)
    gen = torch.Generator().manual_seed(6)
    with torch.no_grad():  # q_norm / k_norm start at one: make them (and the zeroed projections) matter
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.05)
    source = save_model_dir(root / "qk" / "model", model, root / "tokenizer.json", "foundation-base", {"stage": "pretrain"})
    out = root / "hf-qk"
    proc = run_export({"source": str(source), "out": str(out)}, root / "request-qk.json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {"model": model.eval(), "cfg": cfg, "out": out}


def test_qk_norm_exports_as_qwen3_and_transformers_agrees(exported_qk_norm):
    from transformers import AutoModelForCausalLM

    out, cfg = exported_qk_norm["out"], exported_qk_norm["cfg"]
    config = json.loads((out / "config.json").read_text())
    assert (config["model_type"], config["architectures"]) == ("qwen3", ["Qwen3ForCausalLM"]) and "auto_map" not in config
    assert (config["head_dim"], config["use_sliding_window"]) == (cfg.head_dim, False)
    hf, info = AutoModelForCausalLM.from_pretrained(out, trust_remote_code=False, dtype=torch.float32,
                                                    output_loading_info=True)
    assert type(hf).__name__ == "Qwen3ForCausalLM" and not info["missing_keys"] and not info["unexpected_keys"]
    batch = torch.randint(0, cfg.vocab_size, (4, 48), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        diff = (hf.eval()(batch).logits - exported_qk_norm["model"](batch)).abs().max().item()
    assert diff < 1e-4, diff


def test_folder_is_standard_and_verified(exported):
    out, cfg = exported["out"], exported["cfg"]
    names = sorted(p.name for p in out.iterdir())
    assert names == ["artifact-manifest.json", "config.json", "generation_config.json", "model.safetensors",
                     "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json", "tt-export.json"]
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "llama" and config["architectures"] == ["LlamaForCausalLM"]
    assert "auto_map" not in config
    expect = {"vocab_size": cfg.vocab_size, "hidden_size": cfg.hidden_size, "num_hidden_layers": cfg.num_hidden_layers,
              "num_attention_heads": cfg.num_attention_heads, "num_key_value_heads": cfg.num_key_value_heads,
              "intermediate_size": cfg.intermediate_size, "rope_theta": cfg.rope_theta,
              "rms_norm_eps": cfg.rms_norm_eps, "max_position_embeddings": cfg.max_position_embeddings,
              "tie_word_embeddings": False, "bos_token_id": cfg.bos_token_id, "eos_token_id": cfg.eos_token_id,
              "pad_token_id": cfg.pad_token_id}
    assert {k: config[k] for k in expect} == expect
    manifest = json.loads((out / "artifact-manifest.json").read_text())
    assert manifest["kind"] == "foundation-hf" and manifest["engine"] == "foundation"
    listed = {f["path"]: f for f in manifest["files"]}
    assert sorted(listed) == [n for n in names if n != "artifact-manifest.json"]
    for name, entry in listed.items():
        data = (out / name).read_bytes()
        assert entry["size"] == len(data) and entry["sha256"] == hashlib.sha256(data).hexdigest()
    info = json.loads((out / "tt-export.json").read_text())
    assert info["system_message"] == SYSTEM and info["model_id"] == "adder-sft"
    from safetensors import safe_open

    with safe_open(str(out / "model.safetensors"), "pt") as handle:
        for key in handle.keys():
            assert handle.get_tensor(key).dtype == torch.float32


def test_transformers_logits_match_tt(exported):
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(exported["out"], trust_remote_code=False, dtype=torch.float32).eval()
    assert type(hf).__name__ == "LlamaForCausalLM"
    ours = exported["model"]
    gen = torch.Generator().manual_seed(0)
    batch = torch.randint(0, exported["cfg"].vocab_size, (4, 48), generator=gen)
    with torch.no_grad():
        diff = (hf(batch).logits - ours(batch)).abs().max().item()
    assert diff < 1e-4, diff
    # a padded batch of real chat prompts of different lengths (right padding, attention mask)
    tok = exported["tok"]
    prompts = [render_prompt(tok, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}], 96)
               for q in ("What is 2 plus 2?", "What is 15 plus 37? Think.", "Hi")]
    width = max(map(len, prompts))
    pad = T.special_id(tok, T.PAD)
    ids = torch.tensor([p + [pad] * (width - len(p)) for p in prompts])
    mask = torch.tensor([[1] * len(p) + [0] * (width - len(p)) for p in prompts])
    with torch.no_grad():
        theirs = hf(input_ids=ids, attention_mask=mask).logits
        for row, prompt in enumerate(prompts):
            mine = ours(torch.tensor([prompt]))[0]
            assert (theirs[row, : len(prompt)] - mine).abs().max().item() < 1e-4


def test_greedy_generation_matches_tt(exported):
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(exported["out"]).eval()
    tok = exported["tok"]
    prompt = render_prompt(tok, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is 3 plus 4?"}], 96)
    stop, pad = T.special_id(tok, T.ASSISTANT_END), T.special_id(tok, T.PAD)
    ours = generate(exported["model"], [prompt], 12, stop, pad, torch.device("cpu"))[0]
    with torch.no_grad():
        theirs = hf.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False)[0, len(prompt):].tolist()
    assert theirs[: len(ours)] == ours


def test_tokenizer_and_chat_template_match_tt(exported):
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(exported["out"], trust_remote_code=False)
    tok = exported["tok"]
    for text in TEXTS + ["", " ", "\n\n\n", "a" * 300, "mixed 123456789 tokens 🙂 and ğ"]:
        ids = T.encode(tok, text)
        assert hf(text)["input_ids"] == ids
        assert hf.encode(text, add_special_tokens=False) == ids
        assert hf.decode(ids) == T.decode(tok, ids) == text
    assert (hf.bos_token, hf.eos_token, hf.pad_token) == (T.BOS, T.ASSISTANT_END, T.PAD)
    conversation = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is 15 plus 37?"},
                    {"role": "assistant", "content": "52"}, {"role": "user", "content": "And 1 plus 1?"},
                    {"role": "assistant", "content": "2"}]
    expected, _ = render(tok, conversation)
    assert list(hf.apply_chat_template(conversation, tokenize=True, return_dict=False)) == expected
    prompt = render_prompt(tok, conversation[:2], 96)
    assert list(hf.apply_chat_template(conversation[:2], tokenize=True, add_generation_prompt=True,
                                      return_dict=False)) == prompt
    with pytest.raises(Exception, match="unknown chat role"):
        hf.apply_chat_template([{"role": "tool", "content": "x"}], tokenize=False)


def test_export_refuses_an_existing_folder_and_bad_sources(exported):
    root = exported["root"]
    taken = root / "taken"
    taken.mkdir()
    (taken / "keep.txt").write_text("user file")
    proc = run_export({"source": str(exported["source"]), "out": str(taken)}, root / "r1.json")
    assert proc.returncode == 2 and "already exists" in proc.stdout
    assert [p.name for p in taken.iterdir()] == ["keep.txt"]
    proc = run_export({"source": str(root), "out": str(root / "new")}, root / "r2.json")
    assert proc.returncode == 2 and "not a foundation model folder" in proc.stdout
    assert not (root / "new").exists()
    proc = run_export({"source": str(exported["source"]), "out": str(root / "new"), "system_message": "x",
                       "system_message_sha256": "0" * 64}, root / "r3.json")
    assert proc.returncode == 2 and not (root / "new").exists()
    assert not [p for p in root.iterdir() if p.name.startswith(".new")]
