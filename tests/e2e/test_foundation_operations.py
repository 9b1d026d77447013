"""Runs stopped the way supervisors and crashes stop them.

1. systemd, Kubernetes, Slurm and `kill -TERM -<pgid>` send SIGTERM to every process at once: tt, the
   stage, the torchrun agent and every rank. Each time: exit 130, one checkpoint at the step where
   training stopped, the run marked interrupted, and the resumed run ends byte-identical to an
   uninterrupted one (1 process, and `nproc_per_node: 2`).
2. `tt` SIGKILLed mid-pretraining: every stage process notices, checkpoints and exits within seconds;
   a `tt run --resume --no-wait` started while one still lives is refused naming its pid, then succeeds
   (without --no-wait it waits for them: tests/host/runs/test_late_stops.py).

Real `tt`, real stages, real torchrun; processes found through /proc. Every run waits at the step where the
test stops it (TT_HOLD_AT_STEP), so it cannot finish first, and tt and every process under it are held still
while the test signals them (foundation_support.frozen_at_step), so each signal reaches them together.
Periodic checkpoints come after the last step these tests stop at (asserted), so every checkpoint here was
written in answer to a signal. The one-process reference is the session's shared one (also used by
test_foundation_recovery.py).
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from foundation_support import (
    STOP_SETTINGS, checkpoints, frozen_at_step, heartbeat_step, reference_run, tiny_spec, tt, tt_popen,
)
from process_tree import alive, children, send, wait_gone

MODEL = "pretrain/model/model.safetensors"
STEPS = STOP_SETTINGS["pretrain_steps"]
PERIODIC = STOP_SETTINGS["checkpoint_interval_steps"]


def run_state(run_dir: Path) -> dict:
    return json.loads((run_dir / "run.json").read_text())


def assert_checkpoint_at_last_step(run_dir: Path, after: int) -> int:
    """The newest checkpoint is the step training stopped at (its last heartbeat), not an older one."""
    stopped = heartbeat_step(run_dir)
    assert after < stopped < PERIODIC, (after, stopped)  # before any periodic checkpoint, far from the end
    assert checkpoints(run_dir)[-1] == f"step-{stopped:09d}", (checkpoints(run_dir), stopped)
    meta = json.loads((run_dir / "pretrain" / "recovery" / "checkpoints" / f"step-{stopped:09d}" / "metadata.json").read_text())
    assert meta["step"] == stopped
    return stopped


def step_seconds(run_dir: Path) -> float:
    rows = [json.loads(line) for line in (run_dir / "pretrain" / "recovery" / "training-metrics.jsonl").read_text().splitlines()]
    return (rows[-1]["elapsed"] - rows[0]["elapsed"]) / max(1, len(rows) - 1)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return reference_run(tmp_path_factory, **STOP_SETTINGS)


@pytest.fixture(scope="module")
def reference2(tmp_path_factory):
    return reference_run(tmp_path_factory, **STOP_SETTINGS, nproc_per_node=2)


def sigterm_everything_at(tmp_path: Path, spec: Path, run_dir: Path, step: int, processes: int) -> int:
    """Start (or resume) the run, and at `step` send SIGTERM to tt and every process under it at once."""
    proc = tt_popen(tmp_path, "run", spec, "--resume", run_dir, hold_at=step)
    with frozen_at_step(proc, run_dir, step, STEPS) as (_, tree):
        assert len(tree) >= processes, tree  # tt, the stage (or the torchrun agent and its ranks)
        send(tree, signal.SIGTERM)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 130, out
    assert not [p for p in tree if alive(p)], "a process outlived the stop"
    state = run_state(run_dir)
    assert state["status"] == "interrupted" and state["stages"]["pretrain"]["state"] == "interrupted"
    return assert_checkpoint_at_last_step(run_dir, step - 1)


def test_sigterm_to_every_process_at_once_checkpoints_where_it_stopped(tmp_path, reference):
    """Must-show 1, one process: tt and the stage get SIGTERM together, at two points of pretraining."""
    spec = tiny_spec(tmp_path / "spec", **STOP_SETTINGS)
    run_dir = tmp_path / "run"
    started = time.monotonic()
    first = sigterm_everything_at(tmp_path, spec, run_dir, 3, 2)
    second = sigterm_everything_at(tmp_path, spec, run_dir, first + 6, 2)
    assert checkpoints(run_dir) == [f"step-{first:09d}", f"step-{second:09d}"]
    resume_to_the_end(tmp_path, spec, run_dir, second, reference)
    print(f"1 process: stopped at steps {first} and {second}; {time.monotonic() - started:.0f}s")


def test_two_processes_under_sigterm_to_all_and_a_killed_tt(tmp_path, reference2):
    """Must-show 1 with `nproc_per_node: 2` (tt, the torchrun agent and both ranks get SIGTERM together, at
    two points), then must-show 2 on the same run: tt SIGKILLed, twice, the second time with the stage frozen
    (a long step at real sizes) so that a resume in that window is refused; then it ends byte-identical."""
    spec = tiny_spec(tmp_path / "spec", **STOP_SETTINGS, nproc_per_node=2)
    run_dir = tmp_path / "run"
    started = time.monotonic()
    first = sigterm_everything_at(tmp_path, spec, run_dir, 3, 4)
    second = sigterm_everything_at(tmp_path, spec, run_dir, first + 5, 4)
    assert checkpoints(run_dir) == [f"step-{first:09d}", f"step-{second:09d}"]

    # tt SIGKILLed: the torchrun agent gets SIGTERM from the kernel, its ranks checkpoint and all exit.
    proc = tt_popen(tmp_path, "run", spec, "--resume", run_dir, hold_at=second + 3)
    with frozen_at_step(proc, run_dir, second + 3, STEPS) as (at_kill, tree):
        stage = tree[1:]
        assert len(stage) >= 3, stage  # the agent and two ranks
        proc.kill()
        proc.wait()
    gone = wait_gone(stage)
    third = assert_checkpoint_at_last_step(run_dir, second + 2)
    assert third <= at_kill + 2, (at_kill, third)  # noticed at once: it stopped after the step in progress
    assert gone < 30, f"the stage outlived tt by {gone:.1f}s"
    print(f"tt SIGKILL at step {at_kill} -> checkpoint at step {third}, every stage process exited after {gone:.2f}s "
          f"(one step takes {step_seconds(run_dir):.2f}s here)")
    log = (run_dir / "logs" / "pretrain.log").read_text()
    assert f"checkpoint step-{third:09d} saved" in log  # written after tt's pipe closed: kept in the stage log

    # Again with the stage frozen: a resume --no-wait while it lives is refused, naming the pid still running.
    proc = tt_popen(tmp_path, "run", spec, "--resume", run_dir, hold_at=third + 3)
    with frozen_at_step(proc, run_dir, third + 3, STEPS) as (_, tree):
        agent = children()[proc.pid]
        stage = tree[1:]
        proc.kill()
        proc.wait()
        refused = tt(tmp_path, "run", spec, "--resume", run_dir, "--no-wait")  # today's refusal, kept
    message = " ".join((refused.stdout + refused.stderr).split())  # the console wraps long lines
    assert refused.returncode == 2, message
    assert "has exited" in message and f"pid {agent[0]}" in message and "Wait until" in message, message
    wait_gone(stage)
    fourth = assert_checkpoint_at_last_step(run_dir, third + 2)
    resume_to_the_end(tmp_path, spec, run_dir, fourth, reference2)
    print(f"2 processes: stopped at steps {first}, {second}, {third}, {fourth}; {time.monotonic() - started:.0f}s")


def resume_to_the_end(tmp_path: Path, spec: Path, run_dir: Path, stopped: int, reference: Path) -> None:
    resumed = tt(tmp_path, "run", spec, "--resume", run_dir)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"at step {stopped}" in (run_dir / "logs" / "pretrain.log").read_text()
    assert (run_dir / MODEL).read_bytes() == (reference / MODEL).read_bytes()
