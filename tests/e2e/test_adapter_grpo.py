"""GRPO end to end with the real `tt` on the tiny model (CPU): base → SFT → SFT+GRPO in one run. The reinforce stage
sits in the tuning chain (formats/tuning.py): `sft` evaluates the train adapter, `candidate` the reinforce stage's,
the one model registered is the reinforce stage's adapter, the report has the base/SFT/final table, and no
held-out prompt reaches a rollout. The run folder given to `tt models export` under another TT_HOME (which
registered nothing of it) still means the reinforce stage's adapter, the one its last stage declared."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import pytest

from adapter_support import run_resumed, shared_tiny_model, tt, write_spec

GRPO = {"steps": 3, "prompts_per_step": 2, "group_size": 6, "max_new_tokens": 4, "temperature": 1.5,
        "learning_rate": 1e-3, "kl_beta": 0.1, "probe_groups": 6}
HP = {"n_epochs": 4, "max_eval_examples": 8, "eval_batch_size": 16}
# The tiny model's sampled answers never hit a label (the probe would refuse: zero spread); a length grader, which
# every reference passes, gives partial rewards that differ within a group
GRADERS = {"graders": [{"kind": "label"}, {"kind": "max_chars", "max": 8}]}


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Iterator[Path]:
    with shared_tiny_model(tmp_path_factory) as model:
        yield model


def test_base_sft_grpo_in_one_run_registers_the_reinforce_adapter_and_keeps_held_out_prompts_out(tmp_path, model):
    home, folder, run = tmp_path, tmp_path / "spec", tmp_path / "run"
    spec = write_spec(folder, str(model), hyperparameters=HP, reinforcement=GRPO, evaluation=GRADERS)
    report = run_resumed(home, spec, run)
    stages = json.loads((run / "run.json").read_text())["stages"]
    assert all(stages[s]["state"] == "completed" for s in ("train", "sft", "reinforce", "candidate")), stages
    assert "reference" not in stages or stages["reference"].get("state") != "completed"
    assert set(report["held_out_sides"]) == {"baseline", "sft", "candidate"}
    assert " (SFT) → " in report["verdict"] and "tuning" in report
    assert [m["kind"] for m in report["models"]] == ["adapter"]  # one model: the reinforce stage's, not train's
    weights = "adapter_model.safetensors"
    registered = (Path(report["models"][0]["path"]) / weights).read_bytes()
    assert registered == (run / "reinforce" / "adapter" / weights).read_bytes()
    assert registered != (run / "train" / "adapter" / weights).read_bytes()
    assert "## Base, SFT and final" in (run / "report.md").read_text()
    assert "reinforce.reward" in report["metrics"] and "reinforce.reward_std" in report["metrics"]

    held_out = {m["content"] for row in json.loads((run / "candidate" / "request.json").read_text())["eval_prompts"]
                for m in row["messages"] if m["role"] == "user"}
    assert held_out
    rollouts = [json.loads(line) for line in (run / "reinforce" / "rollout-prompts.jsonl").read_text().splitlines()]
    assert len(rollouts) == GRPO["probe_groups"] + GRPO["steps"] * GRPO["prompts_per_step"]
    assert not {r["prompt"] for r in rollouts} & held_out

    elsewhere = tmp_path / "colleague"  # another TT_HOME: the run folder is all it has
    elsewhere.mkdir()
    exported = tt(elsewhere, "models", "export", run, elsewhere / "out", "--json")
    assert exported.returncode == 0, exported.stdout[-2000:] + exported.stderr[-2000:]
    assert (elsewhere / "out" / weights).read_bytes() == (run / "reinforce" / "adapter" / weights).read_bytes()
