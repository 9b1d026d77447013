"""Stages end to end through their real entry points (the harness plays the host)."""

from __future__ import annotations

import json
import shutil

import pytest
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer

from tt_engine_adapter.runtime import generate, manifest
from tt_engine_adapter.testing.harness import sentiment_run

HP = {"n_epochs": 6, "learning_rate": 5e-3, "batch_size": 8, "lora_rank": 8, "lora_dropout": 0.0,
      "max_seq_length": 128, "max_new_tokens": 6, "seed": 3}


def _write_jsonl(path, examples):
    path.write_text("".join(json.dumps({"messages": [{"role": "user", "content": e["input"]},
                                                     {"role": "assistant", "content": e["output"]}]}) + "\n"
                            for e in examples))
    return str(path)


@pytest.fixture(scope="module")
def finished(tmp_path_factory, tiny_llama):
    from tt_engine_adapter.testing.tiny_model import sentiment_examples

    folder = tmp_path_factory.mktemp("run")
    extra = sentiment_examples(100, seed=7)[64:]  # disjoint from the harness's 64 examples
    run = sentiment_run(folder / "r", str(tiny_llama), HP, n_train=48, n_eval=16)
    run.spec["datasets"] = {"train": _write_jsonl(folder / "train.jsonl", extra[:16]), "validation": None,
                            "test": _write_jsonl(folder / "test.jsonl", extra[16:28])}
    for stage in ("prepare", "prefetch", "baseline", "train", "candidate"):
        run.stage(stage)
    return run


@pytest.fixture(scope="module")
def prepared(tmp_path_factory, tiny_llama):
    """The prepare stage of an 8-row run, done once: its train.jsonl only depends on the rows (not on the base model
    or the hyperparameters), and prefetch only reads it."""
    run = sentiment_run(tmp_path_factory.mktemp("prepared") / "r", str(tiny_llama), HP, n_train=8, n_eval=2)
    run.stage("prepare")
    return run.done["prepare"]


def prepared_run(folder, model, prepared, hyperparameters=HP):
    run = sentiment_run(folder, str(model), hyperparameters, n_train=8, n_eval=2)
    run.done["prepare"] = prepared
    return run


def test_candidate_beats_baseline(finished):
    assert finished.exact_match("candidate") > finished.exact_match("baseline")
    assert finished.done["prepare"]["result"]["metrics"]["data.train_rows"] == 48 + 16
    # the prebuilt test set is answered and scored by the engine, for both models
    base, cand = finished.done["baseline"]["result"]["metrics"], finished.done["candidate"]["result"]["metrics"]
    assert base["baseline.test.count"] == cand["candidate.test.count"] == 12
    assert cand["candidate.test.exact_match"] > base["baseline.test.exact_match"]
    metrics = finished.done["train"]["result"]["metrics"]
    assert metrics["train.final_loss"] < finished.done["train"]["result"]["series"]["train.loss"][0][1]
    assert metrics["train.tokens_per_second"] > 0


def test_plain_peft_reproduces_tt_predictions(finished, tiny_llama):
    adapter = finished.done["train"]["result"]["outputs"]["adapter"]
    tok = AutoTokenizer.from_pretrained(tiny_llama)
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_llama), adapter).eval()
    expected = finished.predictions("candidate")
    for prompt in finished.eval_prompts:
        text = tok.apply_chat_template(prompt["messages"], tokenize=False, add_generation_prompt=True,
                                       enable_thinking=False)
        ids = tok(text, add_special_tokens=False, return_tensors="pt")
        out = model.generate(input_ids=ids["input_ids"], attention_mask=ids["attention_mask"], max_new_tokens=6, do_sample=False, pad_token_id=tok.pad_token_id,
                             eos_token_id=tok.convert_tokens_to_ids("<|eot_id|>"))
        answer = tok.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True).strip()
        assert answer == expected[prompt["id"]]


def test_artifact_manifest_lists_and_verifies(finished):
    adapter = finished.done["train"]["result"]["artifacts"][0]["path"]
    data = json.loads(open(f"{adapter}/artifact-manifest.json").read())
    names = {f["path"] for f in data["files"]}
    assert {"adapter_config.json", "adapter_model.safetensors", "tt-adapter.json"} <= names
    assert data["base_model"]["fingerprint"] and data["system_message_sha256"]
    assert manifest.verify_manifest(adapter) == []


def test_one_changed_byte_is_named(finished, tmp_path):
    adapter = tmp_path / "copy"
    shutil.copytree(finished.done["train"]["result"]["outputs"]["adapter"], adapter)
    target = adapter / "adapter_model.safetensors"
    data = bytearray(target.read_bytes())
    data[-1] ^= 0x01
    target.write_bytes(bytes(data))
    problems = manifest.verify_manifest(adapter)
    assert len(problems) == 1 and problems[0].startswith(
        "adapter_model.safetensors: sha256 differs from the manifest (the file was changed): ")


def test_batched_generation_equals_one_at_a_time(tiny_qwen3):
    tok = AutoTokenizer.from_pretrained(tiny_qwen3)
    model = AutoModelForCausalLM.from_pretrained(tiny_qwen3).eval()
    from tt_engine_adapter.testing.tiny_model import sentiment_examples

    prompts = [{"id": str(i), "messages": [{"role": "system", "content": "Label it."},
                                           {"role": "user", "content": e["input"] * (1 + i % 3)}]}
               for i, e in enumerate(sentiment_examples(12, seed=5))]
    kwargs = dict(max_new_tokens=8, max_seq_length=256, device="cpu")
    batched = generate.generate(model, tok, prompts, batch_size=16, **kwargs)
    single = generate.generate(model, tok, prompts, batch_size=1, **kwargs)
    assert batched == single
    assert [p["id"] for p in batched] == [p["id"] for p in prompts]


def test_template_that_cannot_render_fails_before_training(tmp_path, tiny_llama, prepared):
    broken = tmp_path / "broken-model"
    shutil.copytree(tiny_llama, broken)
    (broken / "chat_template.jinja").write_text("{{ raise_exception('no chat here') }}")
    run = prepared_run(tmp_path / "run", broken, prepared)
    result = run.stage("prefetch", check=False)
    assert result["code"] == 2
    assert any("cannot render" in e.get("message", "") for e in result["events"] if e.get("level") == "error")
    assert not (tmp_path / "run" / "prefetch" / "result.json").exists()


def test_prebuilt_row_with_another_system_message_is_refused(tmp_path, tiny_llama):
    run = sentiment_run(tmp_path / "r", str(tiny_llama), HP, n_train=4, n_eval=2)
    rows = [{"messages": [{"role": "user", "content": "fine film"}, {"role": "assistant", "content": "positive"}]},
            {"messages": [{"role": "system", "content": "Something else."}, {"role": "user", "content": "bad film"},
                          {"role": "assistant", "content": "negative"}]}]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    run.spec["datasets"] = {"train": str(tmp_path / "train.jsonl"), "validation": None, "test": None}
    result = run.stage("prepare", check=False)
    assert result["code"] == 2
    assert any("train.jsonl:2" in e.get("message", "") and "system message" in e["message"] for e in result["events"])
    assert not (tmp_path / "r" / "prepare" / "train.jsonl").exists()


def test_prefetch_counts_trimmed_rows_and_refuses_an_instruction_that_cannot_fit(tmp_path, tiny_llama, prepared):
    """Long rows lose user text only (counted in data.trimmed_rows and a note); too short a limit exits 2."""
    run = prepared_run(tmp_path / "trim", tiny_llama, prepared, {**HP, "max_seq_length": 68})
    result = run.stage("prefetch")["result"]
    trimmed = result["metrics"]["data.trimmed_rows"]
    assert 0 < trimmed <= 8
    assert result["notes"] and f"{trimmed} of 8 training rows" in result["notes"][0]

    short = prepared_run(tmp_path / "short", tiny_llama, prepared, {**HP, "max_seq_length": 40})
    refused = short.stage("prefetch", check=False)
    assert refused["code"] == 2
    errors = [e["message"] for e in refused["events"] if e.get("level") == "error"]
    assert any("hyperparameters.max_seq_length is 40" in m and "empty user message" in m for m in errors), errors
    assert not (tmp_path / "short" / "prefetch" / "result.json").exists()
