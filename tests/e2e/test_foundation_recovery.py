"""Items 2 and 4 through `tt run`: SIGKILL / SIGTERM mid-pretraining then `--resume` gives weights
byte-identical to an uninterrupted run; changed settings on resume are refused before any file changes."""

from __future__ import annotations

import json
import signal

import pytest

from foundation_support import (
    checkpoints, heartbeat_step, kill_hard, report, snapshot, tiny_spec, tt, tt_popen, wait_for_step,
)

MODEL = "pretrain/model/model.safetensors"
PRETRAIN = "tt_engine_foundation.stages.pretrain"


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    base = tmp_path_factory.mktemp("reference")
    spec = tiny_spec(base / "spec")
    run_dir = base / "run"
    proc = tt(base, "run", spec, "--resume", run_dir)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return spec, run_dir


def test_sigkill_between_checkpoints_then_resume_is_byte_identical(tmp_path, reference):
    spec, ref = reference
    run_dir = tmp_path / "run"
    proc = tt_popen(tmp_path, "run", spec, "--resume", run_dir)
    reached = wait_for_step(run_dir, 25, proc, checkpoint="step-000000020")
    kill_hard(proc, run_dir, PRETRAIN)
    assert reached < 40 or heartbeat_step(run_dir) < 80, "the run finished before it could be killed"
    assert not (run_dir / MODEL).exists()
    assert "step-000000020" in checkpoints(run_dir)
    resumed = tt(tmp_path, "run", spec, "--resume", run_dir)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    log = (run_dir / "logs" / "pretrain.log").read_text()
    assert "resumed pretraining from" in log
    assert (run_dir / MODEL).read_bytes() == (ref / MODEL).read_bytes()
    assert report(run_dir)["metrics"]["pretrain.steps"] == 80


def test_sigterm_checkpoints_current_step_refuses_changes_then_resumes_identically(tmp_path, reference):
    spec, ref = reference
    run_dir = tmp_path / "run"
    proc = tt_popen(tmp_path, "run", spec, "--resume", run_dir)
    wait_for_step(run_dir, 25, proc)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 130, out
    stopped_at = heartbeat_step(run_dir)
    assert stopped_at < 80
    assert checkpoints(run_dir)[-1] == f"step-{stopped_at:09d}"
    state = json.loads((run_dir / "run.json").read_text())
    assert state["stages"]["pretrain"]["state"] == "interrupted"

    # Item 4: changed depth, learning rate, vocabulary or corpus are refused before any file changes.
    original = spec.read_text()
    corpus = spec.parent / "corpus.jsonl"
    corpus_text = corpus.read_text()
    before = snapshot(run_dir)
    for change in ({"depth": 3}, {"learning_rate": 0.02}, {"vocab_size": 400}, "corpus"):
        if change == "corpus":
            corpus.write_text(corpus_text + json.dumps({"text": "one more line"}) + "\n")
        else:
            data = json.loads(original)
            data["foundation"].update(change)
            spec.write_text(json.dumps(data))
        refused = tt(tmp_path, "run", spec, "--resume", run_dir)
        spec.write_text(original)
        corpus.write_text(corpus_text)
        assert refused.returncode == 2, (change, refused.stdout + refused.stderr)
        assert "new run directory" in (refused.stdout + refused.stderr), change
        assert snapshot(run_dir) == before, change

    resumed = tt(tmp_path, "run", spec, "--resume", run_dir)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    log = (run_dir / "logs" / "pretrain.log").read_text()
    assert f"at step {stopped_at}" in log
    assert (run_dir / MODEL).read_bytes() == (ref / MODEL).read_bytes()
