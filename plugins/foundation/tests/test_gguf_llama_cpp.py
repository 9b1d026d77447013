"""Parity with llama.cpp itself: llama-cpp-python, built from the registry's source archive into the cached
test environment (scripts/llama-cpp-env), loads tt's GGUF export of a tiny foundation model.

Its tokenizer gives tt's ids on the probe text (special-token text as plain text, as tt encodes messages; and
recognised, as in a rendered chat), the rendered chat prompts tokenize to tt's prompt ids, and its greedy
answers (argmax of its logits) equal the engine's own greedy generate at f32 and f16; the q8_0 agreement rate
is printed. When llama-cpp-python cannot be built here the test fails with the build's reason.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from test_export_gguf import SYSTEM, TEXTS, tiny_model
from tt_engine_foundation.runtime import tokenizer as T
from tt_engine_foundation.runtime.chat import render_prompt
from tt_engine_foundation.runtime.generate import generate
from tt_engine_foundation.runtime.model_io import load_model_dir
from tt_engine_foundation.stages import export_gguf
from tt_stagekit.gguf import llama_cpp_env, probe

REPO = Path(__file__).resolve().parents[3]
QUESTIONS = ["What is 15 plus 37?", "Add 1234 and 5678.", "The quick brown fox?", "日本語のテキスト 🎉", "def add(a, b):"]
NEW_TOKENS = 12


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    python = llama_cpp_env.llama_cpp_python(REPO)  # fails (never skips) with the build's reason
    root = tmp_path_factory.mktemp("llama-cpp")
    tok = T.train(TEXTS * 30, 400)
    source, sha = tiny_model(root, tok)
    request = {"source": str(source), "model_id": "adder-sft", "system_message": SYSTEM, "system_message_sha256": sha,
               "format": "gguf"}
    for quant in ("f32", "f16", "q8_0"):  # in this process (test_export_gguf.py runs the entry point)
        export_gguf.export({**request, "out": str(root / quant), "quant": quant})
    model = load_model_dir(source, "cpu").eval()
    prompts = [render_prompt(tok, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}], 64 - NEW_TOKENS)
               for q in QUESTIONS]
    stop = T.special_id(tok, T.ASSISTANT_END)
    torch.manual_seed(0)
    want = generate(model, prompts, NEW_TOKENS, stop, T.special_id(tok, T.PAD), torch.device("cpu"))
    return {"python": python, "root": root, "tok": tok, "prompts": prompts, "want": want, "stop": stop}


def llama_cpp(exports, quant: str, texts=(), rendered=()) -> dict:
    return llama_cpp_env.run_gguf(exports["python"], {
        "gguf": str(exports["root"] / quant / "model.gguf"), "texts": list(texts), "rendered": list(rendered),
        "prompts": exports["prompts"], "max_new_tokens": NEW_TOKENS, "stop": [exports["stop"]], "n_ctx": 64})


def test_llama_cpp_tokenizes_like_tt_and_answers_like_the_engine(exports):
    tok = exports["tok"]
    texts = probe.probe_texts(T.SPECIAL_TOKENS)
    got = llama_cpp(exports, "f32", texts, [T.decode(tok, p) for p in exports["prompts"]])
    differ = [t for t, plain, parsed in zip(texts, got["plain"], got["parsed"])
              if (plain, parsed) != probe.encode_both(tok, t)]
    assert differ == []
    assert got["rendered"] == exports["prompts"]
    assert got["greedy"] == exports["want"]
    f16 = llama_cpp(exports, "f16")
    assert f16["greedy"] == exports["want"]


def test_a_qk_norm_model_runs_in_llama_cpp_as_qwen3(exports):
    """foundation.qk_norm: the export is llama.cpp's qwen3 (q/k norms, halves not permuted) and its greedy
    answers at f32 equal the engine's."""
    import gguf

    root, tok = exports["root"] / "qk", exports["tok"]
    root.mkdir()
    source, sha = tiny_model(root, tok, qk_norm=True)
    export_gguf.export({"source": str(source), "model_id": "adder-qk", "system_message": SYSTEM,
                        "system_message_sha256": sha, "format": "gguf", "out": str(root / "f32"), "quant": "f32"})
    reader = gguf.GGUFReader(str(root / "f32" / "model.gguf"))
    assert reader.get_field("general.architecture").contents() == "qwen3"
    assert {"blk.0.attn_q_norm.weight", "blk.0.attn_k_norm.weight"} <= {t.name for t in reader.tensors}
    model = load_model_dir(source, "cpu").eval()
    torch.manual_seed(0)
    want = generate(model, exports["prompts"], NEW_TOKENS, exports["stop"], T.special_id(tok, T.PAD), torch.device("cpu"))
    got = llama_cpp_env.run_gguf(exports["python"], {
        "gguf": str(root / "f32" / "model.gguf"), "texts": [], "rendered": [], "prompts": exports["prompts"],
        "max_new_tokens": NEW_TOKENS, "stop": [exports["stop"]], "n_ctx": 64})
    assert got["greedy"] == want


def test_q8_0_agreement_rate_is_reported(exports):
    got = llama_cpp(exports, "q8_0")["greedy"]
    pairs = [(a, b) for want, have in zip(exports["want"], got) for a, b in zip(want, have)]
    first_differ = [next((i for i, (a, b) in enumerate(zip(w, h)) if a != b), None) for w, h in zip(exports["want"], got)]
    rate = sum(a == b for a, b in pairs) / len(pairs)
    print(f"\nq8_0 greedy agreement with tt: {rate:.1%} of {len(pairs)} tokens; "
          f"first differing position per prompt: {first_differ}")
    assert len(got) == len(exports["want"]) and rate >= 0.5  # a broken layout or scale agrees on next to nothing
