"""Stops that arrive late, and a resume right after `kill -9` of `tt`.

1. A supervisor signals the stage first and `tt` only later: once the stage has exited interrupted, copies of
   SIGTERM sent to `tt` (here: one every 10 ms until it exits) change nothing, and `tt` exits 130.
2. `tt` SIGKILLed while its stage runs: a `tt run --resume` started while the orphaned stage still lives
   waits for it (saying what it waits for) and then continues to the end; `--no-wait` refuses as before.

The orphaned stage is held still (SIGSTOP) while the resume starts, so the resume always finds it alive.
"""

from __future__ import annotations

import json
import os
import signal
import time

from conftest import echo_spec, write_spec
from echo_run_support import stage_pids, train_step
from process_support import alive, held, wait_until


def test_copies_of_the_stop_that_reach_tt_after_its_stage_exited_change_nothing(tt, tmp_path):
    run = tmp_path / "run"
    proc = tt.popen("run", write_spec(tmp_path / "s", echo_spec(steps=100000, step_seconds=0.05)), "--resume", run)
    wait_until(lambda: train_step(run) >= 1 or proc.poll() is not None, "the first training step")
    stage = wait_until(lambda: stage_pids(run), "the train stage")[0]
    os.killpg(stage, signal.SIGTERM)  # the supervisor's signal reaches the stage first
    wait_until(lambda: not alive(stage), "the stage to stop")
    copies = 0
    while proc.poll() is None:  # ... and tt only after the stage has exited, copy after copy until tt exits
        try:
            os.kill(proc.pid, signal.SIGTERM)
            copies += 1
        except ProcessLookupError:
            break
        time.sleep(0.01)
    code = proc.wait(timeout=120)
    assert code == 130, (code, copies, proc.stderr.read())
    state = json.loads((run / "run.json").read_text())
    assert state["status"] == "interrupted" and state["stages"]["train"]["state"] == "interrupted", state


def test_a_resume_right_after_kill_9_waits_for_the_orphaned_stage_then_continues(tt, tmp_path):
    spec, run = write_spec(tmp_path / "s", echo_spec(steps=40, step_seconds=0.05)), tmp_path / "run"
    proc = tt.popen("run", spec, "--resume", run)
    wait_until(lambda: train_step(run) >= 2 or proc.poll() is not None, "two training steps")
    stage = wait_until(lambda: stage_pids(run), "the train stage")[0]
    with held(stage):  # the orphan cannot finish before the resumes below have found it
        proc.kill()
        proc.wait()
        refused = tt("run", spec, "--resume", run, "--no-wait", "--json")
        assert refused.returncode == 2 and "has exited" in json.loads(refused.stdout)["error"]["message"], refused.stdout
        resume = tt.popen("run", spec, "--resume", run, "--json")
        said = resume.stderr.readline()  # what it waits for, before it waits
        assert "waiting up to" in said and f"pid {stage}" in said and str(run) in said, (said, resume.poll())
        assert resume.poll() is None
    out, err = resume.communicate(timeout=300)  # the orphan runs on, notices tt is gone, exits; the resume goes on
    result = json.loads(out)
    assert resume.returncode == 0 and result["status"] == "completed", (out, err)
    assert result["report"]["stages"]["train"]["this_run"] == "resumed", result
    assert not alive(stage)
