"""`tt pipeline init --foundation` beside a foundation spec writes the contract's recipe fitted to it
(tt_host.pipelines.recipe): the shipped foundation example (which runs RL) plans with it, every `with` setting is
the spec's (no warning), an `rl` step follows the finetune step and the evaluations read its model. Without a
spec the contract's recipe is written as it is. Host only (a plan starts nothing)."""

from __future__ import annotations

import json
from pathlib import Path

from example_copy_support import tracked_copy

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "foundation"


def test_the_recipe_fitted_to_the_shipped_foundation_example_plans(tt, tmp_path):
    tracked_copy(EXAMPLE, tmp_path / "f")
    tt.cwd = tmp_path / "f"
    assert tt("pipeline", "init", "--foundation").returncode == 0
    document = json.loads((tmp_path / "f" / "tunedtensor.pipeline.json").read_text())
    steps = {s["id"]: s for s in document["steps"]}
    spec = json.loads((tmp_path / "f" / "tunedtensor.json").read_text())["foundation"]
    assert steps["rl"]["uses"] == "rl" and steps["rl"]["with"] == {"model": {"from": "sft.model"},
                                                                   "steps": spec["rl_steps"]}
    assert steps["chat"]["with"]["model"] == {"from": "rl.model"}
    assert steps["pretrain"]["with"]["depth"] == spec["depth"]
    assert steps["sft"]["with"]["batchSize"] == spec["batch_size"]
    assert tt("pipeline", "validate").returncode == 0
    proc = tt("pipeline", "plan", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "the spec decides" not in proc.stderr, proc.stderr  # no with-setting warning
    planned = json.loads(proc.stdout)
    assert [s["id"] for s in planned["steps"]] == ["tokenize", "pretrain", "bpb", "sft", "rl", "chat", "infer"]
    assert not any(s["action"] == "refuse" for s in planned["stages"]), planned
    assert not (tmp_path / "f" / ".tuned-tensor").exists()


def test_without_a_spec_the_contracts_recipe_is_written_as_it_is(tt, tmp_path):
    assert tt("pipeline", "init", "--foundation").returncode == 0
    document = json.loads((tmp_path / "tunedtensor.pipeline.json").read_text())
    assert document["name"] == "default-foundation" and "rl" not in [s["uses"] for s in document["steps"]]
    assert document["steps"][1]["with"]["depth"] == 2  # the contract's smoke settings
