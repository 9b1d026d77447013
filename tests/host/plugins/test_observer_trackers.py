"""The shipped tracker observers (plugins/observer-{tensorboard,mlflow,wandb}), loaded through their real entry
points and driven by the host's delivery (tt_host.runs.observers) with a run's calls, including the host-scored
metrics and the general-regression gate, which the e2e foundation run (tests/e2e/test_foundation_reuse.py) has
no stage for; each tracker's own reader reads the result back. A spec's `observers` block is validated strictly."""

from __future__ import annotations

import json

import pytest

from conftest import echo_spec, write_spec
from tracker_support import mlflow_run, tensorboard_scalars, wandb_offline_run
from tt_host.runs.observers import Observers
from tt_host.plugins import load_plugins
from tt_host.runs.runinfo import RunInfo, enabled_observers

GATE = {"type": "gate", "status": "failed", "baseline": {"score": 0.5, "pass_rate": 0.5},
        "candidate": {"score": 0.25, "pass_rate": 0.0}, "delta": {"score": -0.25, "pass_rate": -0.5},
        "failures": ["score dropped"]}


def test_trackers_receive_a_run_with_its_scores_and_gate(tmp_path, monkeypatch):
    monkeypatch.setenv("TT_PLUGINS", "observer-tensorboard,observer-mlflow,observer-wandb")
    monkeypatch.setenv("TT_OBSERVERS", "tensorboard,wandb")  # enabled by the environment, mlflow by the spec
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    plugins = load_plugins()
    assert not plugins.engines and not plugins.problems
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    uri = (tmp_path / "mlruns").as_uri()
    observers_block = {"mlflow": {"tracking_uri": uri, "experiment": "trackers"}}
    info = RunInfo(run_dir=run_dir, run_id="20261130-000000-abcdef12", spec_name="capitals", engine="echo",
                   spec={"name": "capitals", "engine": "echo", "echo": {"steps": 3}}, system_message="Answer.",
                   system_message_sha256="ab" * 32, observers=enabled_observers(observers_block))
    problems: list[str] = []
    observers = Observers(plugins, problems.append)
    observers.run_start(info)
    for step in (1, 2, 3):
        observers.event(str(run_dir), "train", {"type": "progress", "step": step, "total": 3, "unit": "step",
                                                "metrics": {"loss": 1.0 / step}})
    scores = {"baseline.exact_match": 0.5, "candidate.exact_match": 0.75}
    observers.event(str(run_dir), "evaluate", {"type": "scores", "stage": "evaluate", "values": scores})
    observers.event(str(run_dir), "gate", GATE)
    observers.run_end(info, {"status": "completed", "metrics": {**scores, "train.steps": 3}})
    observers.close()
    assert problems == []

    scalars = tensorboard_scalars(run_dir / "tensorboard")
    assert scalars["train/loss"] == [(1, 1.0), (2, 0.5), (3, pytest.approx(1 / 3))]
    assert scalars["scores/candidate.exact_match"] == [(0, 0.75)]
    assert scalars["gate/score_delta"] == [(0, -0.25)] and scalars["gate/passed"] == [(0, 0.0)]

    client, run = mlflow_run(uri, "trackers")
    assert run.data.params["system_message_sha256"] == "ab" * 32 and run.data.params["echo.steps"] == "3"
    assert run.data.metrics["baseline.exact_match"] == 0.5 and run.data.metrics["candidate.exact_match"] == 0.75
    assert run.data.metrics["gate.pass_rate_delta"] == -0.5 and run.data.metrics["gate.passed"] == 0.0
    assert run.info.status == "FINISHED"
    assert json.loads((run_dir / "observers" / "mlflow.json").read_text())["run_id"] == run.info.run_id

    wandb = wandb_offline_run(run_dir)  # offline by default, under the run folder
    assert wandb["config"]["engine"] == "echo" and wandb["config"]["echo"] == {"steps": 3}
    assert [row["train/loss"] for row in wandb["history"]] == [1.0, 0.5, pytest.approx(1 / 3)]
    assert wandb["summary"]["gate/status"] == "failed" and wandb["summary"]["candidate.exact_match"] == 0.75
    assert wandb["exit_code"] == 0


def test_a_run_that_enables_no_tracker_leaves_no_trace(tmp_path, monkeypatch):
    monkeypatch.setenv("TT_PLUGINS", "observer-tensorboard,observer-mlflow,observer-wandb")
    monkeypatch.delenv("TT_OBSERVERS", raising=False)
    monkeypatch.chdir(tmp_path)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    info = RunInfo(run_dir=run_dir, run_id="r", spec_name="s", engine="echo", spec={}, system_message="",
                   system_message_sha256="", observers=enabled_observers({}))
    observers = Observers(load_plugins(), pytest.fail)
    observers.run_start(info)
    observers.event(str(run_dir), "train", {"type": "progress", "step": 1, "total": 1, "metrics": {"loss": 1.0}})
    observers.run_end(info, {"status": "completed", "metrics": {}})
    observers.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"] and not any(run_dir.iterdir())


@pytest.mark.parametrize("block, field", [
    ({"Bad Name": {}}, "observers.Bad Name"),
    ({"mlflow": {"tracking_uri": ["a"]}}, "observers.mlflow.tracking_uri"),
])
def test_a_bad_observers_block_is_refused_naming_the_field(tt, tmp_path, block, field):
    spec = write_spec(tmp_path / "spec", {**echo_spec(steps=1), "observers": block})
    proc = tt("validate", spec)
    assert proc.returncode == 2 and field in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert not (tmp_path / "spec" / ".tuned-tensor").exists()


def test_an_observer_name_no_plugin_answers_to_is_reported_and_the_run_completes(tt, tmp_path):
    tt.env["TT_OBSERVERS"] = "tensorbaord"
    spec = write_spec(tmp_path / "spec", {**echo_spec(steps=1), "observers": {"tensorboard": {}}})
    proc = tt("run", spec, "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["report"]["status"] == "completed"  # stdout stays JSON
    assert proc.stderr.count("observers.tensorbaord: no installed observer plugin is named 'tensorbaord'") == 1
    assert "observers.tensorboard" not in proc.stderr  # the shipped tracker answers to its name
    run_dir = next((tmp_path / "spec" / ".tuned-tensor" / "runs").iterdir())
    assert "train/loss" in tensorboard_scalars(run_dir / "tensorboard")
