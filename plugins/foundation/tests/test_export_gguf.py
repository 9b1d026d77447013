"""GGUF export of a foundation model: what `gguf`'s reader finds, Q8_0's error bound, the tokenizer check.

A tiny model is built with the runtime code and exported through the real entry point
`python -m tt_engine_foundation.stages.export_gguf REQUEST.json`, beside its Hugging Face export.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import gguf
import numpy as np
import pytest
import torch
from safetensors.numpy import load_file
from tokenizers import Regex, pre_tokenizers

from tt_engine_foundation.runtime import tokenizer as T
from tt_engine_foundation.runtime.model import GPT, config_for_depth
from tt_engine_foundation.runtime.model_io import save_model_dir
from tt_stagekit.gguf import tensors

SYSTEM = "You add two whole numbers.\n\nAnswer with the sum only."
TEXTS = ["What is 15 plus 37? The answer is 52. 1234 + 5678 = 6912.", "The quick brown fox.  Twice!\n\tTabs\r\n",
         "日本語のテキスト 🎉🚀👩‍💻 café", "def add(a, b):\n    return a + b\n", "   spaces   "]
OLD_SPLIT = r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,2}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+"""


def run(module: str, request: dict, path) -> subprocess.CompletedProcess:
    path.write_text(json.dumps(request))
    return subprocess.run([sys.executable, "-P", "-m", module, str(path)], capture_output=True, text=True, timeout=900)


def tiny_model(root, tok, qk_norm=False):
    tok.save(str(root / "tokenizer.json"))
    cfg = config_for_depth(1, 400, 64, qk_norm, **T.special_ids(tok))
    model = GPT(cfg)
    model.init_weights(3)
    gen = torch.Generator().manual_seed(4)
    with torch.no_grad():  # the init zeroes residual projections; make every weight matter
        for name, p in model.named_parameters():
            if name.endswith(("q_norm.weight", "k_norm.weight")):  # far from one: their place in the math shows
                p.uniform_(0.2, 3.0, generator=gen)
            else:
                p.add_(torch.randn(p.shape, generator=gen) * 0.05)
    sha = hashlib.sha256(SYSTEM.encode()).hexdigest()
    return save_model_dir(root / "sft" / "model", model, root / "tokenizer.json", "foundation-sft",
                          {"stage": "sft", "system_message_sha256": sha}), sha


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("gguf")
    source, sha = tiny_model(root, T.train(TEXTS * 30, 400))
    base = {"source": str(source), "model_id": "adder-sft", "system_message": SYSTEM, "system_message_sha256": sha}
    outs = {}
    for name, module, extra in (("hf", "tt_engine_foundation.stages.export", {}),
                                ("f16", "tt_engine_foundation.stages.export_gguf", {"format": "gguf", "quant": "f16"}),
                                ("q8_0", "tt_engine_foundation.stages.export_gguf", {"format": "ollama", "quant": "q8_0"})):
        proc = run(module, {**base, "out": str(root / name), **extra}, root / f"{name}.json")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        outs[name] = root / name
    return {"root": root, "source": source, **outs}


def test_reader_finds_metadata_shapes_and_the_hf_chat_template(exported):
    hf, out = exported["hf"], exported["f16"]
    assert sorted(p.name for p in out.iterdir()) == ["artifact-manifest.json", "model.gguf", "tt-export.json"]
    reader = gguf.GGUFReader(str(out / "model.gguf"))
    value = lambda key: reader.get_field(key).contents()
    config = json.loads((hf / "config.json").read_text())
    template = json.loads((hf / "tokenizer_config.json").read_text())["chat_template"]
    assert value("general.architecture") == "llama" and value("tokenizer.ggml.pre") == "qwen2"
    assert value("tokenizer.chat_template").encode() == template.encode()
    assert value("llama.block_count") == config["num_hidden_layers"]
    assert value("llama.embedding_length") == config["hidden_size"]
    assert value("llama.attention.head_count_kv") == config["num_key_value_heads"]
    assert value("llama.context_length") == config["max_position_embeddings"]
    assert value("tokenizer.ggml.eos_token_id") == config["eos_token_id"] == value("tokenizer.ggml.eot_token_id")
    assert value("tokenizer.ggml.bos_token_id") == config["bos_token_id"]
    assert value("tt.system_message") == SYSTEM
    manifest = (exported["source"] / "artifact-manifest.json").read_bytes()
    assert value("tt.source.manifest_sha256") == hashlib.sha256(manifest).hexdigest()
    assert value("tt.end_of_turn_tokens") == [T.ASSISTANT_END]
    tokens = value("tokenizer.ggml.tokens")
    assert tokens[config["eos_token_id"]] == T.ASSISTANT_END and len(tokens) == config["vocab_size"]
    state = load_file(str(hf / "model.safetensors"))
    shapes = {t.name: tuple(int(n) for n in reversed(t.shape)) for t in reader.tensors}
    assert len(shapes) == len(state)
    assert shapes["token_embd.weight"] == state["model.embed_tokens.weight"].shape
    assert shapes["blk.0.attn_q.weight"] == state["model.layers.0.self_attn.q_proj.weight"].shape
    assert shapes["output.weight"] == state["lm_head.weight"].shape


def test_token_types_are_the_tokenizers_own(exported):
    """Each id's type as llama.cpp reads it, from the Hugging Face export's tokenizer.json (not tt's vocab code):
    its vocabulary NORMAL, special added tokens CONTROL, other added ones USER_DEFINED, the padding up to the
    model's vocabulary UNUSED (llama.cpp never emits an UNUSED token, so an ordinary one typed so is lost)."""
    hf = exported["hf"]
    tokenizer = json.loads((hf / "tokenizer.json").read_text())
    size = json.loads((hf / "config.json").read_text())["vocab_size"]
    expected = [gguf.TokenType.UNUSED] * size
    for index in tokenizer["model"]["vocab"].values():
        expected[index] = gguf.TokenType.NORMAL
    for added in tokenizer["added_tokens"]:
        expected[added["id"]] = gguf.TokenType.CONTROL if added["special"] else gguf.TokenType.USER_DEFINED
    for name in ("f16", "q8_0"):
        reader = gguf.GGUFReader(str(exported[name] / "model.gguf"))
        types = [gguf.TokenType(t) for t in reader.get_field("tokenizer.ggml.token_type").contents()]
        assert types == expected, [(i, t, e) for i, (t, e) in enumerate(zip(types, expected)) if t != e][:5]
    assert {gguf.TokenType.NORMAL, gguf.TokenType.CONTROL} <= set(expected)


def test_q8_0_dequantizes_within_its_bound(exported):
    hf = load_file(str(exported["hf"] / "model.safetensors"))
    reader = gguf.GGUFReader(str(exported["q8_0"] / "model.gguf"))
    checked = 0
    for t in reader.tensors:
        if t.tensor_type != gguf.GGMLQuantizationType.Q8_0:
            continue
        got = gguf.quants.dequantize(t.data, t.tensor_type).reshape(-1, 32)
        name = {"token_embd.weight": "model.embed_tokens.weight", "output.weight": "lm_head.weight"}.get(t.name)
        if name is None:
            continue
        want = hf[name].astype(np.float32).reshape(-1, 32)
        bound = np.abs(want).max(axis=1, keepdims=True) / 127 * 0.5 + 1e-3 * np.abs(want).max(axis=1, keepdims=True)
        assert (np.abs(got - want) <= bound).all(), t.name
        checked += 1
    assert checked == 2
    permuted = tensors.permute_qk(hf["model.layers.0.self_attn.q_proj.weight"], 1)
    q = next(t for t in reader.tensors if t.name == "blk.0.attn_q.weight")
    got = gguf.quants.dequantize(q.data, q.tensor_type).reshape(permuted.shape)
    assert np.abs(got - permuted).max() <= np.abs(permuted).max() / 127
    assert np.abs(got - hf["model.layers.0.self_attn.q_proj.weight"]).max() > np.abs(permuted).max() / 127


def test_ollama_folder_has_a_modelfile_for_the_same_chat(exported):
    out = exported["q8_0"]
    text = (out / "Modelfile").read_text()
    assert text.startswith("FROM ./model.gguf\n")
    assert f'SYSTEM """{SYSTEM}"""' in text and f'PARAMETER stop "{T.ASSISTANT_END}"' in text
    assert "PARAMETER num_ctx 64" in text and text.endswith("PARAMETER temperature 0\n")  # the evaluation's greedy decoding
    assert f"{T.USER_START}{{{{ .Content }}}}{T.USER_END}{{{{ if $last }}}}{T.ASSISTANT_START}" in text
    info = json.loads((out / "tt-export.json").read_text())
    assert info["kind"] == "foundation-ollama" and info["gguf"]["ollama_name"] == "adder-sft"


def test_a_tokenizer_with_the_old_digit_split_is_refused_naming_the_strings(tmp_path):
    tok = T.new_tokenizer()
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(OLD_SPLIT), behavior="isolated"),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    from tokenizers import trainers
    tok.train_from_iterator(TEXTS * 30, trainers.BpeTrainer(vocab_size=400, special_tokens=list(T.SPECIAL_TOKENS),
                                                            initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    source, sha = tiny_model(tmp_path, tok)
    proc = run("tt_engine_foundation.stages.export_gguf", {"source": str(source), "out": str(tmp_path / "out"),
                                                           "model_id": "old", "format": "gguf", "quant": "f16"},
               tmp_path / "request.json")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "'1234'" in proc.stdout and "'12345'" in proc.stdout and "'7'" not in proc.stdout
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out*"))
