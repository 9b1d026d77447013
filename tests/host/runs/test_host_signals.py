"""The host's side of stop requests (tt_host/engines/runner.py, docs/operations.md): copies of one request that reach
`tt` together stop the stage once, at its step boundary; a second request after the window kills it at once.

Nothing here depends on how fast the machine is: each signal is sent once `tt` has taken the previous one
(no longer pending in /proc), and a stage that must not reach its step boundary is held still (SIGSTOP).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time

from conftest import echo_spec, write_spec
from echo_run_support import stage_pids, train_step
from process_support import alive, held, send_and_wait_taken, signal_pending, wait_until


def start(tt, tmp_path, window: float, step_seconds: float):
    path = write_spec(tmp_path / "s", echo_spec(steps=100000, step_seconds=step_seconds))
    run = tmp_path / "run"
    tt.env["TT_SIGNAL_WINDOW_SECONDS"] = str(window)
    proc = tt.popen("run", path, "--resume", run)
    wait_until(lambda: train_step(run) >= 1 or proc.poll() is not None, "the first training step")
    assert proc.poll() is None, proc.stderr.read()
    return proc, run


def finish(proc, run):
    try:
        code = proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        raise AssertionError("tt still runs 120 s after the last signal") from None
    state = json.loads((run / "run.json").read_text())
    return code, state, (run / "logs" / "train.log").read_text()


def _end(proc, stage: int) -> None:
    """Whatever a failed test left running: tt and the stage's group."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(stage, signal.SIGKILL)


def test_copies_of_one_request_stop_the_stage_once_at_its_step_boundary(tt, tmp_path):
    """Three signals, each sent once tt has taken the one before, all within the window (60 s here: what is
    checked is what a copy changes, not how fast signals travel), all while the stage is held still (SIGSTOP)
    mid-step: it cannot reach a step boundary before every copy has been taken, so a host that took a copy for a
    second request kills it where it stands. Released, it finishes its step and stops there."""
    proc, run = start(tt, tmp_path, window=60, step_seconds=0.5)
    (stage,) = wait_until(lambda: stage_pids(run), "the train stage")
    try:
        with held(stage):
            for sig in (signal.SIGTERM, signal.SIGTERM, signal.SIGINT):  # a supervisor's, a terminal's, one more
                send_and_wait_taken(proc.pid, sig)
            wait_until(lambda: signal_pending(stage, signal.SIGTERM), "tt to forward the stop to the held stage")
            assert alive(stage)
        code, state, log = finish(proc, run)
    finally:
        _end(proc, stage)
    assert code == 130
    assert state["status"] == "interrupted" and state["stages"]["train"]["state"] == "interrupted"
    assert "stopped at step" in log  # the stage finished its step: the host did not kill it


WINDOW = 0.5  # TT_SIGNAL_WINDOW_SECONDS for the second-request test


def test_a_second_request_after_the_window_kills_the_stage_at_once(tt, tmp_path):
    """The stage is held still (SIGSTOP), so it can never reach a step boundary and stop by itself, and the grace
    period is 600 s: only the host's kill on a second request ends it. The first SIGINT is forwarded (SIGTERM
    pending on the held stage); the second is sent WINDOW after that was seen, so after the window by tt's clock
    whatever the load. The run ends interrupted well before the grace period (bound: 120 s)."""
    tt.env["TT_STAGE_GRACE_SECONDS"] = "600"
    proc, run = start(tt, tmp_path, window=WINDOW, step_seconds=0.05)
    (stage,) = wait_until(lambda: stage_pids(run), "the train stage")
    try:
        with held(stage):
            proc.send_signal(signal.SIGINT)
            wait_until(lambda: signal_pending(stage, signal.SIGTERM), "tt to forward the first request")
            time.sleep(WINDOW)  # tt took the first request before it forwarded it: this one is after the window
            proc.send_signal(signal.SIGINT)  # a person's second Ctrl-C
            code, state, log = finish(proc, run)
            assert code == 130 and state["status"] == "interrupted"
            assert not alive(stage), "the stage outlived the second request"
        assert "stopped at step" not in log  # killed where it stood, without waiting for the boundary
    finally:
        _end(proc, stage)
