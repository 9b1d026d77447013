"""A real pretrained base as it ships (SmolLM2-135M-Instruct, scripts/real-base): its tokenizer (pad = EOS =
end-of-turn) and chat template, a short LoRA on its real weights that raises the held-out score, the GGUF export
in llama.cpp on its real 49k vocabulary, serving, and the same model by hub id from a Hugging Face cache.

Every test reads ONE prepared run (conftest `real_run`: 16 training rows, 8 optimizer steps, 12 held-out
prompts); docs/testing.md "The real base" has what it costs.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

from tt_engine_adapter.runtime import batches, chat, model_source
from tt_engine_adapter.runtime.data import encode_rows, read_jsonl
from tt_stagekit.gguf import llama_cpp_env, probe

REPO = Path(__file__).resolve().parents[3]
TT_ENTRY = "import sys; from tt_host.cli.entry import main; sys.argv[0] = 'tt'; sys.exit(main())"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"


def test_the_real_base_is_smollm2_from_the_pinned_wheel_as_shipped(real_base):
    info = json.loads((real_base / "tt-real-base.json").read_text())
    assert info["wheel_sha256"] == WHEEL_SHA256 and info["dtype"] == "float32"
    config = json.loads((real_base / "config.json").read_text())
    assert (config["model_type"], config["num_hidden_layers"], config["vocab_size"]) == ("llama", 30, 49152)
    assert config["tie_word_embeddings"] is True and "quantization_config" not in config
    tok = AutoTokenizer.from_pretrained(real_base)
    eot = chat.end_of_turn_id(tok)
    assert tok.pad_token == tok.eos_token == tok.convert_ids_to_tokens(eot) == "<|im_end|>"


def test_the_real_chat_template_with_and_without_a_system_message(real_base):
    tok = AutoTokenizer.from_pretrained(real_base)
    user = {"role": "user", "content": "the film was great"}
    mine = chat.render_prompt(tok, [{"role": "system", "content": "Rate the movie review."}, user])
    assert mine == ("<|im_start|>system\nRate the movie review.<|im_end|>\n<|im_start|>user\nthe film was great"
                    "<|im_end|>\n<|im_start|>assistant\n")
    # without one, SmolLM2's template writes its own default system turn; tt always sends the spec's
    assert "You are a helpful AI assistant named SmolLM" in chat.render_prompt(tok, [user])
    assert mine.count("<|im_start|>") == 3 and chat.encode_prompt(tok, [{"role": "system", "content": "x"}, user],
                                                                  128)[0].count(tok.bos_token_id) == 3


def test_the_real_tokenizer_pads_with_eos_and_keeps_each_answers_eos_label(real_base):
    """pad = EOS = <|im_end|>: the collated batch keeps the <|im_end|> label ending each answer and gives the padding
    (same id) none; by id, every answer would lose the token that teaches the model to stop."""
    tok = AutoTokenizer.from_pretrained(real_base)
    eot = chat.end_of_turn_id(tok)
    rows = [chat.encode_row(tok, f"r{i}", [{"role": "system", "content": "Rate the movie review."},
                                           {"role": "user", "content": text}, {"role": "assistant", "content": label}],
                            128, eot)
            for i, (text, label) in enumerate([("great", "thumbs up"), ("the plot was dull and slow " * 3, "thumbs down")])]
    assert chat.padding(tok).record() == {"id": eot, "token": "<|im_end|>", "source": "pad token = EOS",
                                          "masked_by": "position"}
    batch = batches.collate(rows, chat.pad_token_id(tok))
    labels, owner = batch.inputs["labels"], batch.row_of_token
    assert int(((labels == eot) & (owner >= 0)).sum()) == 2 and (owner < 0).any()
    assert (labels[owner < 0] == chat.IGNORE_INDEX).all() and (batch.inputs["attention_mask"][owner < 0] == 0).all()


def test_the_model_as_shipped_trains_with_the_eos_label_kept(real_base, real_run):
    prefetch = real_run.done["prefetch"]["result"]
    assert prefetch["outputs"]["padding"] == {"id": 2, "token": "<|im_end|>", "source": "pad token = EOS",
                                              "masked_by": "position"}
    assert any("masked by position" in note for note in prefetch["notes"])
    tok = AutoTokenizer.from_pretrained(real_base)
    rows = encode_rows(tok, read_jsonl(real_run.run_dir / "prepare" / "train.jsonl"), 128)
    # each row's supervised tokens end with <|im_end|>, the pad's id, and the stage counted them all
    assert all(r.labels[-1] == tok.pad_token_id == r.input_ids[-1] for r in rows)
    assert prefetch["metrics"]["data.supervised_tokens"] == sum(r.supervised for r in rows)
    info = json.loads((Path(real_run.done["train"]["result"]["outputs"]["adapter"]) / "tt-adapter.json").read_text())
    assert info["chat"]["padding"]["source"] == "pad token = EOS"


def test_a_short_lora_on_real_weights_raises_the_held_out_score(real_run):
    baseline, candidate = real_run.exact_match("baseline"), real_run.exact_match("candidate")
    print(f"held-out exact match: baseline {baseline:.2f}, candidate {candidate:.2f}; "
          f"train {real_run.done['train']['result']['metrics']}")
    assert baseline <= 0.25 and candidate >= baseline + 0.5
    # the tuned model stops at <|im_end|>: it learned the end of turn that is also the pad
    assert all(len(p.split()) <= 3 for p in real_run.predictions("candidate").values())


def test_the_gguf_export_of_the_tuned_real_model_matches_llama_cpp(real_base, real_run, tmp_path):
    """The merged f32 GGUF in llama.cpp: the real 49k vocabulary tokenizes the probe texts and the chat prompts
    as the model's own tokenizer does, and its greedy answers are the candidate stage's."""
    from tokenizers import Tokenizer

    from tt_engine_adapter.stages import export_gguf

    python = llama_cpp_env.llama_cpp_python(REPO)  # fails (never skips) with the build's reason
    system = real_run.system
    export_gguf.export({"source": real_run.done["train"]["result"]["outputs"]["adapter"], "model_id": "real",
                        "system_message": system, "system_message_sha256": hashlib.sha256(system.encode()).hexdigest(),
                        "out": str(tmp_path / "f32"), "format": "gguf", "quant": "f32"})
    tok = AutoTokenizer.from_pretrained(real_base)
    prompts = real_run.eval_prompts[:4]
    rendered = [chat.render_prompt(tok, p["messages"]) for p in prompts]
    ids = [chat.encode_text(tok, text) for text in rendered]
    stop = chat.end_of_turn_id(tok)
    specials = [t["content"] for t in json.loads((real_base / "tokenizer.json").read_text())["added_tokens"]]
    texts = probe.probe_texts(specials)
    got = llama_cpp_env.run_gguf(python, {"gguf": str(tmp_path / "f32" / "model.gguf"), "texts": texts,
                                          "rendered": rendered, "prompts": ids, "max_new_tokens": 4, "stop": [stop],
                                          "n_ctx": 256})
    source = Tokenizer.from_file(str(real_base / "tokenizer.json"))
    assert [t for t, plain, parsed in zip(texts, got["plain"], got["parsed"])
            if (plain, parsed) != probe.encode_both(source, t)] == []
    assert got["rendered"] == ids
    answers = [tok.decode([t for t in g if t != stop], skip_special_tokens=True).strip() for g in got["greedy"]]
    assert answers == [real_run.predictions("candidate")[p["id"]] for p in prompts]


def test_serving_the_real_adapter_answers_what_the_candidate_stage_answered(real_base, real_run, tmp_path):
    """The server at temperature 0 answers as the candidate stage; so does `tt chat --url` (the host's real CLI)
    at its defaults, every held-out prompt after a /reset: the report's greedy decoding, not the server's 1.0."""
    from openai import OpenAI

    from tt_engine_adapter.testing import serving

    adapter = real_run.done["train"]["result"]["outputs"]["adapter"]
    with serving.start(tmp_path, real_base, adapter_path=adapter, model_name="real",
                       system_message=real_run.system) as server:
        client = OpenAI(base_url=server.url + "/v1", api_key="unused")
        for prompt in real_run.eval_prompts[:4]:  # room past the answer: the server must stop at <|im_end|> itself
            answer = client.chat.completions.create(model="real", temperature=0, max_tokens=16,
                                                    messages=[m for m in prompt["messages"] if m["role"] == "user"])
            assert answer.choices[0].message.content.strip() == real_run.predictions("candidate")[prompt["id"]]
        asked = [next(m["content"] for m in p["messages"] if m["role"] == "user") for p in real_run.eval_prompts]
        assert all("\n" not in text for text in asked)
        env = {k: v for k, v in os.environ.items() if k not in ("TT_API_KEY", "VIRTUAL_ENV")}
        chat = subprocess.run([str(REPO / ".venv" / "bin" / "python"), "-P", "-c", TT_ENTRY, "chat", "--url",
                               server.url, "--max-tokens", "16"], input="\n/reset\n".join(asked) + "\n",
                              capture_output=True, text=True, env=env, timeout=300)
    assert chat.returncode == 0 and "(greedy, as the evaluation decoded" in chat.stderr, chat.stderr
    report = real_run.predictions("candidate")
    assert [line.strip() for line in chat.stdout.splitlines()] == [report[p["id"]] for p in real_run.eval_prompts], chat.stdout


def test_the_hub_id_resolves_through_huggingface_hub_from_a_local_cache(real_base, tmp_path):
    """Laid out as huggingface_hub lays out a download (blobs, snapshots/<commit> links, refs/main), the model
    resolves by its id through `scripts/real-base --hub` and the engine's own model source, offline."""
    commit = "0" * 39 + "1"
    repo = tmp_path / "hub" / "models--HuggingFaceTB--SmolLM2-135M-Instruct"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    for file in real_base.iterdir():
        if file.name != "tt-real-base.json":
            (snapshot / file.name).symlink_to(file)
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1",
           "TT_REAL_BASE_PYTHON": sys.executable}
    done = subprocess.run([str(REPO / "scripts" / "real-base"), "--hub", "main"], capture_output=True, text=True,
                          env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == str(snapshot)
    from huggingface_hub import constants

    saved = constants.HF_HUB_CACHE
    constants.HF_HUB_CACHE = str(tmp_path / "hub")
    try:
        found = model_source.fetch("HuggingFaceTB/SmolLM2-135M-Instruct", "main")
    finally:
        constants.HF_HUB_CACHE = saved
    assert (found["path"], found["revision"]) == (str(snapshot), commit)


@pytest.fixture(autouse=True)
def _threads():
    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
