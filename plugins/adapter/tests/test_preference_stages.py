"""The preference stages through their real entry points on the tiny model: derived pairs come from training
prompts only (their sampling moves the bar batch by batch), the reference stage's log-probs are the only
reference forwards, the preference stage registers the final adapter and candidate evaluates it, a SIGTERM'd
preference stage resumes to the same bytes, and a spec whose samples never disagree is refused (exit 2); the
preference adapter's tt-adapter.json records its tuning."""

from __future__ import annotations

import json

import pytest
from safetensors.torch import load_file

from tt_engine_adapter.testing.harness import sentiment_run, worse_than_sft_warning
from tt_stagekit.sameness import normalize_prompt

HP = {"n_epochs": 6, "batch_size": 4, "lora_rank": 8, "lora_dropout": 0.0, "learning_rate": 1e-2,
      "max_seq_length": 96, "max_new_tokens": 4, "eval_batch_size": 16, "checkpoint_interval_steps": 2,
      "warmup_ratio": 0.0}
PREFERENCE = {"loss": "dpo", "beta": 0.1, "simpo_gamma": 0.5, "pairs": "derived", "reference": "sft",
              "samples_per_prompt": 6, "temperature": 1.0, "max_new_tokens": None, "sft_weight": 0.0,
              "learning_rate": 5e-3, "n_epochs": 3, "max_steps": None, "batch_size": 2}


def _run(path, tiny_llama, **preference):
    run = sentiment_run(path, str(tiny_llama), HP, n_train=16, n_eval=8)
    run.spec["preference"] = {**PREFERENCE, **preference}
    return run


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_llama):
    """prepare, prefetch, train and sft once; the tests copy what they need."""
    run = _run(tmp_path_factory.mktemp("pref") / "run", tiny_llama)
    for stage in ("prepare", "prefetch", "train", "sft"):
        run.stage(stage)
    return run


def test_derived_pairs_hold_no_held_out_prompt_and_the_final_adapter_is_the_preference_one(trained):
    run = trained
    assert not run.done["train"]["result"].get("artifacts"), "train registers nothing when a tuning stage follows"
    reference = run.stage("reference")["result"]
    pairs = [json.loads(line) for line in (run.run_dir / "reference" / "pairs.jsonl").read_text().splitlines()]
    assert pairs and reference["metrics"]["reference.pairs"] == len(pairs)
    assert reference["metrics"]["reference.forwards"] > 0
    held_out = {normalize_prompt(p["messages"][-1]["content"]) for p in run.eval_prompts}
    training = {normalize_prompt(r["messages"][-1 - 1]["content"]) for r in run.train_rows}
    for pair in pairs:
        user = normalize_prompt(pair["messages"][-1]["content"])
        assert user not in held_out, f"held-out prompt in pair {pair['id']}"
        assert user in training
        assert pair["chosen"] != pair["rejected"]
    result = run.stage("preference")["result"]
    assert result["metrics"]["preference.reference_forwards"] == 0
    assert result["metrics"]["preference.steps"] > 0
    assert 0 <= result["metrics"]["preference.probe_score"] <= 1, result["metrics"]
    assert 0 <= result["metrics"]["preference.probe_score_after"] <= 1
    assert [a["kind"] for a in result["artifacts"]] == ["adapter"]
    assert (run.run_dir / "preference" / "adapter" / "artifact-manifest.json").is_file()
    # tt-adapter.json records the tuning that made the adapter; the SFT adapter's records none
    info = json.loads((run.run_dir / "preference" / "adapter" / "tt-adapter.json").read_text())
    sft_info = json.loads((run.run_dir / "train" / "adapter" / "tt-adapter.json").read_text())
    assert "tuning" not in sft_info
    assert info.pop("tuning") == {"stage": "preference", **PREFERENCE,
                                  "completed_steps": result["metrics"]["preference.steps"],
                                  "from": str(run.run_dir / "train" / "adapter")}
    assert info == sft_info
    candidate = run.stage("candidate")
    assert any(str(run.run_dir / "preference" / "adapter") in e.get("message", "") for e in candidate["events"])
    sft = run.done["sft"]["result"]
    assert "sft.eval_seconds" in sft["metrics"] and "candidate.eval_seconds" in candidate["result"]["metrics"]


def _copy(source, run, stages) -> None:
    """`stages` of the run `source` into `run` (folders and results, paths rewritten): a test's own copy."""
    import shutil

    for stage in stages:
        shutil.copytree(source.run_dir / stage, run.run_dir / stage)
        text = (run.run_dir / stage / "result.json").read_text().replace(str(source.run_dir), str(run.run_dir))
        run.done[stage] = {"dir": str(run.run_dir / stage), "result": json.loads(text)}


def test_a_sigterm_preference_stage_resumes_to_the_same_bytes(trained, tmp_path):
    straight = _run(tmp_path / "straight", trained.spec["base_model"])
    _copy(trained, straight, ("prepare", "prefetch", "train", "sft"))
    straight.stage("reference")
    broken = _run(tmp_path / "broken", trained.spec["base_model"])
    _copy(straight, broken, ("prepare", "prefetch", "train", "sft", "reference"))
    done = straight.stage("preference")["result"]
    code, err = broken.stopped_at("preference", 3)
    assert code == 130, err[-2000:]
    assert not (broken.run_dir / "preference" / "adapter").exists()
    resumed = broken.stage("preference", resume=True)
    assert any("resumed from step-" in e.get("message", "") for e in resumed["events"])
    assert resumed["result"]["series"]["preference.loss"] == done["series"]["preference.loss"]
    a = load_file(str(straight.run_dir / "preference" / "adapter" / "adapter_model.safetensors"))
    b = load_file(str(broken.run_dir / "preference" / "adapter" / "adapter_model.safetensors"))
    assert a.keys() == b.keys() and a
    for key in a:
        assert a[key].equal(b[key]), key


def test_a_model_left_worse_than_sft_on_the_probe_prompts_is_said_with_the_setting_to_change_first(trained,
                                                                                                   tmp_path):
    """A learning rate far too high wrecks the LoRA: the probe's training prompts, answered greedily after the last
    step, score below the SFT adapter's answers to them; the stage says so as a warning before it ends, naming
    preference.sft_weight first. The adapter is still published (the report and activation's gate judge)."""
    run = _run(tmp_path / "wrecked", trained.spec["base_model"], learning_rate=1.0)
    _copy(trained, run, ("prepare", "prefetch", "train"))
    run.stage("reference")
    warned = worse_than_sft_warning(run.stage("preference"), "preference.probe_score", "preference.probe_score_after")
    assert warned.index("preference.sft_weight above 0 (now 0;") < warned.index("preference.learning_rate (now 1)")
    assert (run.run_dir / "preference" / "adapter" / "adapter_model.safetensors").exists()


def test_samples_that_never_disagree_are_refused_naming_why(trained, tmp_path):
    run = _run(tmp_path / "same", trained.spec["base_model"], temperature=0.0001, samples_per_prompt=2)
    _copy(trained, run, ("prepare", "prefetch", "train"))
    refused = run.stage("reference", check=False)
    assert refused["code"] == 2
    message = " ".join(e.get("message", "") for e in refused["events"])
    assert "no pair could be derived" in message and "preference.samples_per_prompt" in message


def test_sampling_derived_pairs_moves_the_bar_after_each_batch_of_prompts(trained, tmp_path):
    """The reference stage's sampling (minutes on the real base) is never one silent stretch: a progress event in
    prompts after each batch of eval_batch_size prompts, before the sampling's summary line."""
    run = _run(tmp_path / "batches", trained.spec["base_model"], samples_per_prompt=2)
    run.spec["hyperparameters"]["eval_batch_size"] = 5
    _copy(trained, run, ("prepare", "prefetch", "train"))
    events = run.stage("reference")["events"]
    sampled = next(i for i, e in enumerate(events) if e.get("message", "").startswith("sampled "))
    moves = [e for e in events[:sampled] if e.get("type") == "progress"]
    assert [(e["step"], e["total"], e["unit"]) for e in moves] == [(5, 16, "prompt"), (10, 16, "prompt"),
                                                                   (15, 16, "prompt"), (16, 16, "prompt")], moves
    assert [e["metrics"]["answers"] for e in moves] == [10, 20, 30, 32]
    assert all(e["metrics"]["answers_per_second"] > 0 for e in moves)


def test_a_regex_grader_that_backtracks_ends_within_its_limit_in_derived_pairs(trained, tmp_path):
    """Derived pairs graded by a pattern that backtracks for hours on the samples: each match ends at the one time
    limit and fails, reported in a warning; no pair can be derived, so the stage refuses (exit 2), never hangs."""
    run = _run(tmp_path / "slow", trained.spec["base_model"], samples_per_prompt=2)
    run.spec["evaluation"] = {"graders": [{"kind": "regex", "name": "slow", "pattern": "(?:.?.?.?.?.?.?.?.?){0,80}X"}]}
    _copy(trained, run, ("prepare", "prefetch", "train"))
    refused = run.stage("reference", check=False)
    assert refused["code"] == 2
    messages = [e.get("message", "") for e in refused["events"]]
    assert any("match limit" in m and "'slow' on" in m for m in messages), messages
    assert any("no pair could be derived" in m for m in messages), messages
