"""Parity with llama.cpp itself for a merged adapter: llama-cpp-python, built from the registry's source archive
into the cached test environment (scripts/llama-cpp-env), loads tt's GGUF export of a tiny LoRA adapter
merged into its Llama-style base (the architecture whose Q/K rows tt permutes).

Its tokenizer gives the model's ids on the probe text, the chat prompts rendered with the model's template
tokenize to the ids tt serves with, and its greedy answers equal transformers' greedy generate on the merged
Hugging Face export (what `tt serve` serves) at f32 and f16; the q8_0 agreement rate is printed. When
llama-cpp-python cannot be built here the test fails with the build's reason.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch

from test_export_merged import SYSTEM, make_adapter
from tt_engine_adapter.runtime import chat
from tt_engine_adapter.stages import export as hf_export
from tt_engine_adapter.stages import export_gguf
from tt_stagekit.gguf import llama_cpp_env, probe

REPO = Path(__file__).resolve().parents[3]
QUESTIONS = ["the film was great", "honestly the plot is dull", "Add 1234 and 5678.", "日本語 🎉"]
NEW_TOKENS = 10


@pytest.fixture(scope="module")
def exports(tiny_llama, tmp_path_factory):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    python = llama_cpp_env.llama_cpp_python(REPO)  # fails (never skips) with the build's reason
    root = tmp_path_factory.mktemp("llama-cpp-adapter")
    adapter = make_adapter(tiny_llama, root / "adapter")
    request = {"source": str(adapter), "model_id": "tuned", "system_message": SYSTEM,
               "system_message_sha256": hashlib.sha256(SYSTEM.encode()).hexdigest()}
    # in this process (test_export_gguf.py runs the entry points)
    hf_export.export({**request, "out": str(root / "hf")})
    for quant in ("f32", "f16", "q8_0"):
        export_gguf.export({**request, "out": str(root / quant), "format": "gguf", "quant": quant})
    tokenizer = AutoTokenizer.from_pretrained(root / "hf")
    model = AutoModelForCausalLM.from_pretrained(root / "hf", dtype=torch.float32).eval()
    rendered = [chat.render_prompt(tokenizer, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}])
                for q in QUESTIONS]
    prompts = [chat.encode_text(tokenizer, text) for text in rendered]
    stop = tokenizer.convert_tokens_to_ids("<|eot_id|>")
    want = []
    with torch.no_grad():
        for ids in prompts:
            out = model.generate(torch.tensor([ids]), max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=stop,
                                 pad_token_id=tokenizer.pad_token_id)
            want.append(out[0, len(ids):].tolist())
    return {"python": python, "root": root, "tokenizer": tokenizer, "rendered": rendered, "prompts": prompts,
            "want": want, "stop": stop}


def llama_cpp(exports, quant: str, texts=(), rendered=()) -> dict:
    return llama_cpp_env.run_gguf(exports["python"], {
        "gguf": str(exports["root"] / quant / "model.gguf"), "texts": list(texts), "rendered": list(rendered),
        "prompts": exports["prompts"], "max_new_tokens": NEW_TOKENS, "stop": [exports["stop"]], "n_ctx": 256})


def test_llama_cpp_tokenizes_like_the_model_and_answers_like_transformers(exports):
    from tokenizers import Tokenizer

    source = Tokenizer.from_file(str(exports["root"] / "hf" / "tokenizer.json"))
    specials = [t["content"] for t in json.loads((exports["root"] / "hf" / "tokenizer.json").read_text())["added_tokens"]]
    texts = probe.probe_texts(specials)
    got = llama_cpp(exports, "f32", texts, exports["rendered"])
    differ = [t for t, plain, parsed in zip(texts, got["plain"], got["parsed"])
              if (plain, parsed) != probe.encode_both(source, t)]
    assert differ == []
    assert got["rendered"] == exports["prompts"]
    assert got["greedy"] == exports["want"]
    assert llama_cpp(exports, "f16")["greedy"] == exports["want"]


def test_q8_0_agreement_rate_is_reported(exports):
    got = llama_cpp(exports, "q8_0")["greedy"]
    pairs = [(a, b) for want, have in zip(exports["want"], got) for a, b in zip(want, have)]
    rate = sum(a == b for a, b in pairs) / len(pairs)
    print(f"\nq8_0 greedy agreement with transformers: {rate:.1%} of {len(pairs)} tokens")
    assert len(got) == len(exports["want"]) and rate >= 0.5  # a broken layout or scale agrees on next to nothing
