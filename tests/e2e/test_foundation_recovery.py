"""Items 2 and 4 through `tt run`: SIGKILL / SIGTERM mid-pretraining then `--resume` gives weights
byte-identical to an uninterrupted run; changed settings on resume are refused before any file changes.

The uninterrupted run is the session's shared reference (foundation_support.reference_run, STOP_SETTINGS);
each run waits at the step where it is stopped (TT_HOLD_AT_STEP) and is held still while it is signalled
(foundation_support.frozen_at_step), so it cannot finish first."""

from __future__ import annotations

import json
import signal

import pytest

from foundation_support import (
    STOP_SETTINGS, checkpoints, frozen_at_step, heartbeat_step, reference_run, report, snapshot, tiny_spec, tt,
    tt_popen,
)
from process_tree import send

MODEL = "pretrain/model/model.safetensors"
STEPS = STOP_SETTINGS["pretrain_steps"]
PERIODIC = f"step-{STOP_SETTINGS['checkpoint_interval_steps']:09d}"


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return reference_run(tmp_path_factory, **STOP_SETTINGS)


def test_sigkill_between_checkpoints_then_resume_is_byte_identical(tmp_path, reference):
    spec = tiny_spec(tmp_path / "spec", **STOP_SETTINGS)
    run_dir = tmp_path / "run"
    after = STOP_SETTINGS["checkpoint_interval_steps"] + 5
    proc = tt_popen(tmp_path, "run", spec, "--resume", run_dir, hold_at=after)
    with frozen_at_step(proc, run_dir, after, STEPS, checkpoint=PERIODIC) as (_, pids):
        send(pids, signal.SIGKILL)  # tt and every stage process: what a power cut leaves behind
    proc.wait(timeout=30)
    assert not (run_dir / MODEL).exists()
    assert checkpoints(run_dir)[-1] == PERIODIC  # the one it resumes from: the steps after it are lost
    resumed = tt(tmp_path, "run", spec, "--resume", run_dir)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    log = (run_dir / "logs" / "pretrain.log").read_text()
    assert "resumed pretraining from" in log and f"{PERIODIC} at step {after - 5}" in log, log
    assert (run_dir / MODEL).read_bytes() == (reference / MODEL).read_bytes()
    assert report(run_dir)["metrics"]["pretrain.steps"] == STEPS


def test_sigterm_checkpoints_current_step_refuses_changes_then_resumes_identically(tmp_path, reference):
    spec = tiny_spec(tmp_path / "spec", **STOP_SETTINGS)
    run_dir = tmp_path / "run"
    proc = tt_popen(tmp_path, "run", spec, "--resume", run_dir, hold_at=25)
    with frozen_at_step(proc, run_dir, 25, STEPS):
        proc.send_signal(signal.SIGTERM)  # to tt alone: it forwards the stop to the stage
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 130, out
    stopped_at = heartbeat_step(run_dir)
    assert 25 <= stopped_at < STEPS
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
    assert (run_dir / MODEL).read_bytes() == (reference / MODEL).read_bytes()
