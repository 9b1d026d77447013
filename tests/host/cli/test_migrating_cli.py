"""Moving from the Node CLI: legacy spec keys, ./tunedtensor.json defaults, `tt runs get|events|compare`.

The Node 0.13 spec uses the adapter engine's schema (host venv only, nothing
is downloaded by `tt validate`); the runs use the echo test engine.
"""

from __future__ import annotations

import json
import os
import signal
import threading

from conftest import echo_spec, write_spec
from echo_run_support import stage_pids, train_step
from process_support import held, wait_until

SYSTEM = "Classify the sentiment."
REVISION = "0123456789abcdef0123456789abcdef01234567"


def node_spec(folder):
    """A spec as the Node CLI 0.13 wrote it: id, dataset_prebuilt, hyperparameters.base_model_revision, eval_cases."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = [{"messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"prebuilt review {i}"},
                          {"role": "assistant", "content": "positive" if i % 2 else "negative"}]} for i in range(4)]
    (folder / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return {
        "id": "sentiment-node",
        "engine": "adapter",
        "system_prompt": SYSTEM,
        "base_model": "org/tiny-model",
        "hyperparameters": {"n_epochs": 1, "base_model_revision": REVISION},
        "dataset_prebuilt": {"training": "train.jsonl", "format": "chat-jsonl"},
        "examples": [{"input": f"review {i}", "output": "positive" if i % 2 else "negative"} for i in range(6)],
        "eval_cases": [{"input": f"held review {i}", "expected_output": "negative"} for i in range(2)],
    }


def test_node_spec_validates_with_one_warning_per_legacy_key(tt, tmp_path):
    write_spec(tmp_path, node_spec(tmp_path))
    code, out = tt.json("validate")  # ./tunedtensor.json by default
    assert code == 0, out
    assert [w["loc"] for w in out["warnings"]] == ["id", "hyperparameters.base_model_revision", "dataset_prebuilt",
                                                   "eval_cases"]
    for warning, new in zip(out["warnings"], ("`name`", "`base_model_revision`", "`datasets`", "`examples`")):
        assert new in warning["msg"], warning
    assert out["train_count"] + out["eval_count"] == 8  # six examples and the two eval cases
    human = tt("validate")
    assert human.returncode == 0
    lines = [line for line in human.stderr.splitlines() if line.startswith("warning:")]
    assert len(lines) == 4, human.stderr
    doctor = tt.json("doctor")[1]  # ./tunedtensor.json by default too
    assert {c["name"] for c in doctor["checks"] if c["status"] == "warn"} >= {"spec id", "spec eval_cases"}


def test_misspelled_keys_still_exit_2(tt, tmp_path):
    for key, loc in (("eval_case", "eval_case"), ("datasets_prebuilt", "datasets_prebuilt")):
        spec = node_spec(tmp_path / key)
        spec[key] = spec.pop("eval_cases")
        code, out = tt.json("validate", write_spec(tmp_path / key, spec))
        assert code == 2 and loc in [e["loc"] for e in out["errors"]], out
    spec = node_spec(tmp_path / "inner")
    spec["dataset_prebuilt"]["trainig"] = spec["dataset_prebuilt"].pop("training")
    code, out = tt.json("validate", write_spec(tmp_path / "inner", spec))
    assert code == 2 and out["errors"][0]["loc"] == "dataset_prebuilt.trainig", out
    spec = node_spec(tmp_path / "both")
    spec["name"] = "another"
    code, out = tt.json("validate", write_spec(tmp_path / "both", spec))  # Node's `id` beside a `name`: kept
    assert code == 0 and out["warnings"][0]["loc"] == "id" and "recorded identity" in out["warnings"][0]["msg"], out


def test_run_defaults_to_tunedtensor_json_and_runs_compare(tt, tmp_path):
    write_spec(tmp_path, echo_spec(steps=3))
    code, first = tt.json("run")
    assert code == 0, first
    second_spec = write_spec(tmp_path, echo_spec(steps=7), "other.json")
    code, second = tt.json("run", second_spec)
    assert code == 0, second
    a, b = first["run_dir"], second["run_dir"]
    code, data = tt.json("runs", "compare", a, b)
    assert code == 0 and [r["run_dir"] for r in data["runs"]] == [a, b]
    assert data["metrics"]["train.steps"] == [3, 7]
    human = tt("runs", "compare", a, b.rsplit("/", 1)[1])  # a folder and an id under ./.tuned-tensor/runs
    assert human.returncode == 0, human.stderr
    header, *rows = human.stdout.splitlines()
    assert header.split() == ["metric", first["report"]["run_id"], second["report"]["run_id"], "difference"]
    assert any(row.split() == ["train.steps", "3", "7", "4"] for row in rows), human.stdout
    code, got = tt.json("runs", "get", b)
    assert code == 0 and got["status"] == "completed" and got["live"] is False
    assert got["stages"]["train"]["state"] == "completed" and got["metrics"]["train.steps"] == 7
    assert tt("runs", "get", tmp_path / "nope").returncode == 2


def test_runs_events_follow_streams_a_live_run_until_it_ends(tt, tmp_path):
    """The run's stage is held still (SIGSTOP) after its first step, so the run cannot end before the follower's
    first progress event; let go then, the follower streams to the run's end. A follower that printed only at
    the end would be waited for 120 s, then the run let go, and the check below fails."""
    path = write_spec(tmp_path / "s", echo_spec(steps=30, step_seconds=0.05))
    run = tmp_path / "run"
    runner = tt.popen("run", path, "--resume", run)
    wait_until(lambda: train_step(run) >= 1 or runner.poll() is not None, "the first training step")
    assert runner.poll() is None, runner.stderr.read()
    (stage,) = stage_pids(run)
    events = []
    with held(stage):
        follower = tt.popen("runs", "events", run, "--follow", "--json")
        let_go = threading.Timer(120, os.killpg, (stage, signal.SIGCONT))
        let_go.start()
        for line in follower.stdout:
            events.append(json.loads(line))
            if events[-1].get("type") == "progress":
                break
        let_go.cancel()
        live_while_streaming = runner.poll() is None
    events.extend(json.loads(line) for line in follower.stdout)
    assert follower.wait(timeout=120) == 0, follower.stderr.read()
    assert runner.wait(timeout=120) == 0
    assert live_while_streaming, "the first progress event arrived only after the run had ended"
    steps = [e["step"] for e in events if e["stage"] == "train" and e["type"] == "progress"]
    assert steps == list(range(1, 31))
    assert any(e["stage"] == "evaluate" and e["type"] == "progress" for e in events)  # streamed to the run's end
    assert [e["stage"] for e in events if e["type"] == "artifact"] == ["train"]
    human = tt("runs", "events", run)
    assert human.returncode == 0 and "train        progress 30/30 step loss=0.03333" in human.stdout
