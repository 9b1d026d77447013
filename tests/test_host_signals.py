"""The host's side of stop requests (tt_host/runner.py, docs/operations.md): copies of one request that reach
`tt` together stop the stage once, at its step boundary; a second request after the window kills it at once.

The echo engine's training step takes 4 s here, so a stage killed by the host never logs "stopped at step".
"""

from __future__ import annotations

import json
import signal
import time

from conftest import echo_spec, write_spec
from test_run_lifecycle import train_step, wait_for

WINDOW = 0.5  # TT_SIGNAL_WINDOW_SECONDS for these runs
STEP_SECONDS = 4.0


def start(tt, tmp_path):
    path = write_spec(tmp_path / "s", echo_spec(steps=20, step_seconds=STEP_SECONDS))
    run = tmp_path / "run"
    tt.env["TT_SIGNAL_WINDOW_SECONDS"] = str(WINDOW)
    proc = tt.popen("run", path, "--resume", run)
    assert wait_for(lambda: train_step(run) >= 1), proc.stderr.read() if proc.poll() is not None else "no progress"
    return proc, run


def finish(proc, run):
    code = proc.wait(timeout=60)
    state = json.loads((run / "run.json").read_text())
    return code, state, (run / "logs" / "train.log").read_text()


def test_copies_of_one_request_stop_the_stage_once_at_its_step_boundary(tt, tmp_path):
    proc, run = start(tt, tmp_path)
    for sig in (signal.SIGTERM, signal.SIGTERM, signal.SIGINT):  # a supervisor's copy, a terminal's, one more
        proc.send_signal(sig)
        time.sleep(0.05)
    code, state, log = finish(proc, run)
    assert code == 130
    assert state["status"] == "interrupted" and state["stages"]["train"]["state"] == "interrupted"
    assert "stopped at step" in log  # the stage finished its step: the host did not kill it


def test_a_second_request_after_the_window_kills_the_stage_at_once(tt, tmp_path):
    proc, run = start(tt, tmp_path)
    done = train_step(run)
    assert wait_for(lambda: train_step(run) > done)  # just after a step boundary: the next one is 4 s away
    proc.send_signal(signal.SIGINT)
    time.sleep(WINDOW + 0.3)
    stage_alive_at = time.monotonic()
    proc.send_signal(signal.SIGINT)  # a person's second Ctrl-C
    code, state, log = finish(proc, run)
    assert code == 130 and state["status"] == "interrupted"
    assert "stopped at step" not in log  # killed mid-step, without waiting for the boundary
    assert time.monotonic() - stage_alive_at < STEP_SECONDS
