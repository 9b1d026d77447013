"""Preference tuning end to end with the real `tt` on the tiny model (CPU): base → SFT → SFT+DPO in one run, a
rerun with only `beta` changed reuses the reference stage (run.json: its record untouched, 0 reference
forwards in the preference stage), and a final model worse than SFT is said first in the report and is
activated only with --force."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import pytest

from adapter_support import run_resumed, shared_tiny_model, stage_starts, tt, write_spec

PREFERENCE = {"beta": 0.1, "samples_per_prompt": 6, "temperature": 1.0, "learning_rate": 5e-3, "n_epochs": 2,
              "batch_size": 4}
HP = {"n_epochs": 4, "max_eval_examples": 8, "eval_batch_size": 16}


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Iterator[Path]:
    with shared_tiny_model(tmp_path_factory) as model:
        yield model


def _run_json(run: Path) -> dict:
    return json.loads((run / "run.json").read_text())


def test_base_sft_dpo_then_a_beta_rerun_reuses_the_reference_and_a_worse_final_needs_force(tmp_path, model):
    home, folder, run = tmp_path, tmp_path / "spec", tmp_path / "run"
    spec = write_spec(folder, str(model), hyperparameters=HP, preference=PREFERENCE)
    first = run_resumed(home, spec, run)
    stages = _run_json(run)["stages"]
    assert all(stages[s]["state"] == "completed" for s in ("train", "sft", "reference", "preference", "candidate"))
    assert set(first["held_out_sides"]) == {"baseline", "sft", "candidate"}
    assert " (SFT) → " in first["verdict"] and "tuning" in first
    assert [m["kind"] for m in first["models"]] == ["adapter"]  # one model: the preference stage's, not train's
    weights = "adapter_model.safetensors"
    registered = (Path(first["models"][0]["path"]) / weights).read_bytes()
    assert registered == (run / "preference" / "adapter" / weights).read_bytes()
    assert registered != (run / "train" / "adapter" / weights).read_bytes()
    assert first["metrics"]["reference.forwards"] > 0 and first["metrics"]["preference.reference_forwards"] == 0
    assert "## Base, SFT and final" in (run / "report.md").read_text()

    before, reference_record = stage_starts(run), stages["reference"]
    write_spec(folder, str(model), hyperparameters=HP, preference={**PREFERENCE, "beta": 0.5})
    second = run_resumed(home, spec, run)
    after = stage_starts(run)
    assert {s: after[s] == before[s] for s in ("train", "sft", "reference", "preference", "candidate")} == \
        {"train": True, "sft": True, "reference": True, "preference": False, "candidate": False}
    assert _run_json(run)["stages"]["reference"] == reference_record  # run.json: the reference stage did not run
    assert second["stages"]["reference"]["this_run"] == "reused"
    assert second["metrics"]["preference.reference_forwards"] == 0

    # A learning rate that wrecks the adapter: the final model is worse than SFT; said first, and --force needed.
    write_spec(folder, str(model), hyperparameters=HP, preference={**PREFERENCE, "learning_rate": 1.0})
    third = run_resumed(home, spec, run)
    assert third["stages"]["reference"]["this_run"] == "reused"
    assert third["tuning"]["worse_than_sft"] is True, third["tuning"]
    assert "WORSE than SFT" in third["verdict"]
    assert "WORSE than SFT" in (run / "report.md").read_text().splitlines()[4]
    model_id = third["models"][0]["id"]
    refused = tt(home, "models", "activate", model_id)
    assert refused.returncode == 1 and "WORSE than SFT" in refused.stdout + refused.stderr, refused.stderr
    forced = tt(home, "models", "activate", model_id, "--force", "--json")
    assert forced.returncode == 0, forced.stdout + forced.stderr
