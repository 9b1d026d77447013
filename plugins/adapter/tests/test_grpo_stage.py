"""The `reinforce` stage (GRPO) through the stage harness: the zero-spread probe, held-out prompts kept out of every
rollout, a model left worse than SFT on the probe rows said while the stage runs, the adapter's tt-adapter.json
recording its tuning, and an interrupted run resumed to byte-identical LoRA weights on CPU."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
from pathlib import Path

import pytest

from tt_engine_adapter.runtime.config import ReinforcementSettings
from tt_engine_adapter.testing.harness import sentiment_run, worse_than_sft_warning

SFT = {"n_epochs": 50, "max_steps": 40, "batch_size": 8, "lora_rank": 4, "lora_dropout": 0.0, "learning_rate": 3e-3,
       "max_seq_length": 96, "max_new_tokens": 4, "checkpoint_interval_steps": 2, "warmup_ratio": 0.0}
GRPO = {"steps": 6, "prompts_per_step": 2, "group_size": 4, "max_new_tokens": 4, "temperature": 1.5,
        "learning_rate": 1e-3, "kl_beta": 0.1, "probe_groups": 4}


def _run(path, model, sft=SFT, grpo=GRPO):
    run = sentiment_run(path, str(model), dict(sft), n_train=24, n_eval=8)
    run.spec["reinforcement"] = dict(grpo)
    return run


@pytest.fixture(scope="module")
def sft_run(tmp_path_factory, tiny_llama):
    """Prepared rows, the base model and an SFT adapter that gets the label right some of the time."""
    run = _run(tmp_path_factory.mktemp("grpo") / "sft", tiny_llama)
    for stage in ("prepare", "prefetch", "train"):
        run.stage(stage)
    return run


def _copy(sft_run, path, model, **grpo):
    run = _run(path, model, grpo={**GRPO, **grpo})
    run.done = dict(sft_run.done)
    return run


def test_reinforce_refuses_when_every_probe_group_has_zero_spread(tmp_path, tiny_llama, sft_run):
    run = _copy(sft_run, tmp_path / "flat", tiny_llama, temperature=0.01)  # near-greedy: a group answers as one
    out = run.stage("reinforce", check=False)
    assert out["code"] == 2
    message = " ".join(e.get("message", "") for e in out["events"])
    assert "zero spread in every group" in message and "reinforcement.temperature" in message, message
    assert not (run.run_dir / "reinforce" / "adapter").exists()


def test_no_held_out_prompt_reaches_a_rollout(tmp_path, tiny_llama, sft_run):
    run = _copy(sft_run, tmp_path / "clean", tiny_llama)
    result = run.stage("reinforce")["result"]
    seen = [json.loads(line) for line in open(result["outputs"]["rollout_prompts"], encoding="utf-8")]
    held_out = {p["messages"][-1]["content"] for p in run.eval_prompts}
    training = {r["id"]: r["messages"][1]["content"] for r in run.train_rows}
    assert len(seen) == GRPO["probe_groups"] + GRPO["steps"] * GRPO["prompts_per_step"]  # the recheck logs none
    assert 0 <= result["metrics"]["reinforce.probe_reward_after"] <= 1
    for entry in seen:
        assert entry["prompt"] not in held_out, entry
        assert training[entry["id"]] == entry["prompt"], entry
    assert result["metrics"]["reinforce.steps"] == GRPO["steps"]
    assert [s for s, _ in result["series"]["reinforce.reward"]] == list(range(1, GRPO["steps"] + 1))
    assert "reinforce.reward_std" in result["series"] and result["artifacts"][0]["kind"] == "adapter"
    # published as every adapter stage publishes (publish_adapter): the SFT adapter's tt-adapter.json plus the tuning
    info = json.loads((run.run_dir / "reinforce" / "adapter" / "tt-adapter.json").read_text())
    sft = sft_run.done["train"]["result"]["outputs"]["adapter"]
    assert info.pop("tuning") == {"stage": "reinforce", **dataclasses.asdict(ReinforcementSettings(**GRPO)),
                                  "completed_steps": GRPO["steps"], "from": sft}
    assert info == json.loads((Path(sft) / "tt-adapter.json").read_text())

    # a held-out prompt among the training rows (a broken split) stops the stage before any rollout
    leaky = _copy(sft_run, tmp_path / "leaky", tiny_llama)
    prepared = leaky.run_dir / "prepared-train.jsonl"
    rows = [json.loads(line) for line in open(leaky.done["prepare"]["result"]["outputs"]["train"], encoding="utf-8")]
    bad = {"id": "leak", "messages": leaky.eval_prompts[0]["messages"] + [{"role": "assistant", "content": "x"}]}
    prepared.write_text("".join(json.dumps(r) + "\n" for r in rows + [bad]))
    leaky.done["prepare"] = json.loads(json.dumps(leaky.done["prepare"]))
    leaky.done["prepare"]["result"]["outputs"]["train"] = str(prepared)
    request = leaky.request

    def with_eval_prompts(stage, resume=False, device="cpu"):
        path = request(stage, resume, device)
        body = json.loads(path.read_text())
        body["eval_prompts"] = leaky.eval_prompts
        path.write_text(json.dumps(body))
        return path

    leaky.request = with_eval_prompts
    refused = leaky.stage("reinforce", check=False)
    assert refused["code"] != 0
    assert any("training row leak has the prompt of a held-out row" in e.get("message", "")
               for e in refused["events"])
    assert not (leaky.run_dir / "reinforce" / "rollout-prompts.jsonl").exists()


def test_a_model_left_worse_than_sft_on_the_probe_rows_is_said_with_the_setting_to_change_first(tmp_path, tiny_llama,
                                                                                                   sft_run):
    """A learning rate far too high wrecks the LoRA: after the last step the probe's groups, sampled again with the
    same seeds, earn less than the SFT adapter earned; the stage says so as a warning before it ends, naming
    reinforcement.learning_rate first. The adapter is still published (the report and activation's gate judge)."""
    run = _copy(sft_run, tmp_path / "wrecked", tiny_llama, learning_rate=0.5, kl_beta=0.0, steps=3)
    warned = worse_than_sft_warning(run.stage("reinforce"), "reinforce.probe_reward", "reinforce.probe_reward_after")
    assert warned.index("reinforcement.learning_rate (now 0.5)") < warned.index("reinforcement.kl_beta")
    assert (run.run_dir / "reinforce" / "adapter" / "adapter_model.safetensors").exists()


def test_interrupted_reinforce_resumes_to_the_same_bytes(tmp_path, tiny_llama, sft_run, monkeypatch):
    straight = _copy(sft_run, tmp_path / "straight", tiny_llama)
    done = straight.stage("reinforce")["result"]
    broken = _copy(sft_run, tmp_path / "broken", tiny_llama)
    with monkeypatch.context() as held:
        held.setenv("TT_HOLD_AT_STEP", "3")
        proc = broken.start("reinforce")
    for line in proc.stdout:
        event = json.loads(line) if line.startswith("{") else {}
        if event.get("type") == "progress" and event["step"] >= 3:
            os.killpg(proc.pid, signal.SIGTERM)
            break
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err[-2000:]
    assert not (broken.run_dir / "reinforce" / "adapter").exists()
    resumed = broken.stage("reinforce", resume=True)["result"]
    assert resumed["series"] == done["series"]
    a = (straight.run_dir / "reinforce" / "adapter" / "adapter_model.safetensors").read_bytes()
    b = (broken.run_dir / "reinforce" / "adapter" / "adapter_model.safetensors").read_bytes()
    assert a == b
    sft = sft_run.done["train"]["result"]["outputs"]["adapter"]
    assert open(f"{sft}/adapter_model.safetensors", "rb").read() != a  # GRPO moved the weights
    shutil.rmtree(broken.run_dir / "reinforce" / "checkpoints")


def test_a_regex_grader_that_backtracks_ends_within_its_limit_in_the_probe(tmp_path, tiny_llama, sft_run):
    """A pattern that slips the nesting rule and backtracks for hours on the answers: each match ends at the one
    time limit (tt_stagekit.regexlimit), scores 0 and is reported; the probe then refuses (zero spread), exit 2."""
    from tt_stagekit.graders.kinds import MAX_TIMEOUTS

    run = _copy(sft_run, tmp_path / "slow", tiny_llama, probe_groups=2, group_size=4)
    run.spec["evaluation"] = {"graders": [{"kind": "regex", "name": "slow", "pattern": "(?:.?.?.?.?.?.?.?.?){0,80}X"}]}
    out = run.stage("reinforce", check=False)
    assert out["code"] == 2
    warned = [e["message"] for e in out["events"] if e.get("level") == "warning" and "match limit" in e.get("message", "")]
    assert len(warned) == 1 and "'slow' on" in warned[0] and f"after {MAX_TIMEOUTS} such answers" in warned[0], out
    assert "no sampled answer earns any reward" in " ".join(e.get("message", "") for e in out["events"])
