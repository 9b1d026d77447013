"""The foundation engine through the warm stage server (TT_STAGE_SERVER=1; docs/operations.md "Stage server"):
a served run writes the model an uninterrupted plain run writes, byte for byte, its stages forked by the server;
a stop of `tt` mid-pretraining through the server checkpoints, and the resumed run ends with the same bytes."""

from __future__ import annotations

import json
import signal

import pytest

from foundation_support import (STOP_SETTINGS, frozen_at_step, heartbeat_step, reference_run, report, tiny_spec,
                                tt, tt_popen)

MODEL = "pretrain/model/model.safetensors"
STEPS = STOP_SETTINGS["pretrain_steps"]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return reference_run(tmp_path_factory, **STOP_SETTINGS)


@pytest.fixture
def served(monkeypatch):
    monkeypatch.setenv("TT_STAGE_SERVER", "1")  # tt_env copies this process's environment


def test_a_served_run_writes_the_bytes_of_a_plain_one(tmp_path, reference, served):
    spec = tiny_spec(tmp_path / "spec", **STOP_SETTINGS)
    run_dir = tmp_path / "run"
    done = tt(tmp_path, "run", spec, "--resume", run_dir)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    server_log = (run_dir / "logs" / "stage-server.log").read_text()
    assert "tt_engine_foundation.stages.warm imported, serving 7 stage modules" in server_log, server_log
    for stage in ("tokenizer", "token_cache", "pretrain", "bpb", "chat_eval"):
        assert "forked by the warm server" in (run_dir / "logs" / f"{stage}.log").read_text(), stage
    assert (run_dir / MODEL).read_bytes() == (reference / MODEL).read_bytes()
    mine, theirs = report(run_dir)["metrics"], report(reference)["metrics"]
    for key in ("pretrain.steps", "pretrain.final_loss", "bpb.value", "chat_eval.exact_match"):
        assert mine.get(key) == theirs.get(key), key
    assert (run_dir / "chat_eval" / "predictions.jsonl").read_bytes() == \
        (reference / "chat_eval" / "predictions.jsonl").read_bytes()


def test_a_stop_of_tt_mid_pretraining_through_the_server_resumes_to_the_same_bytes(tmp_path, reference, served):
    spec = tiny_spec(tmp_path / "spec", **STOP_SETTINGS)
    run_dir = tmp_path / "run"
    proc = tt_popen(tmp_path, "run", spec, "--resume", run_dir, hold_at=25)
    with frozen_at_step(proc, run_dir, 25, STEPS):
        proc.send_signal(signal.SIGTERM)  # to tt alone: it forwards the stop to the served stage
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 130, out
    assert 25 <= heartbeat_step(run_dir) < STEPS
    assert json.loads((run_dir / "run.json").read_text())["stages"]["pretrain"]["state"] == "interrupted"
    assert "forked by the warm server" in (run_dir / "logs" / "pretrain.log").read_text()
    resumed = tt(tmp_path, "run", spec, "--resume", run_dir)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "resumed pretraining from" in (run_dir / "logs" / "pretrain.log").read_text()
    assert (run_dir / MODEL).read_bytes() == (reference / MODEL).read_bytes()
