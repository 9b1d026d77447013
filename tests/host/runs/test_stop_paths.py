"""Stop paths no other test covers: `tt serve`'s second Ctrl-C and its kill after the grace period, and SIGHUP
(a closed tmux session; `nohup`).

`tt serve` runs the echo engine's server (tests/engines/echo), told by TT_ECHO_SERVE_STOP to stay up on a
first stop request (as a server finishing a request in flight) or to ignore every one, so what ends it is
what `tt` does. SIGHUP: a real tmux session closed with kill-session, and `nohup`. Every wait is for a state
(a line, a pid gone, a signal taken), bounded generously.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import TT_BIN, echo_spec, write_spec
from echo_run_support import stage_pids, train_step
from process_support import alive, send_and_wait_taken, wait_until


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One echo run to serve (module-wide: the tests only serve it)."""
    from conftest import base_env
    from plugin_site import echo_site

    root = tmp_path_factory.mktemp("served")
    env = base_env(root, echo_site(root / "site"))
    spec = write_spec(root / "project", echo_spec(steps=1, step_seconds=0))
    done = subprocess.run([TT_BIN, "run", str(spec), "--resume", str(root / "run"), "--json"], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return env, root / "run"


def _serve(trained, **env: str) -> tuple[subprocess.Popen, dict]:
    base, run = trained
    process = subprocess.Popen([TT_BIN, "serve", str(run), "--port", "0", "--json"], env=dict(base, **env),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    for line in process.stdout:
        event = json.loads(line)
        if event.get("type") == "ready":
            return process, event
    raise AssertionError(f"tt serve did not become ready (exit {process.wait()}): {process.stderr.read()}")


def _log_line(process: subprocess.Popen, text: str) -> None:
    assert process.stdout is not None
    for line in process.stdout:
        if text in line:
            return
    raise AssertionError(f"tt serve ended before logging {text!r}")


def test_a_second_ctrl_c_stops_the_server_at_once(trained):
    """The first Ctrl-C is forwarded and the server keeps answering its request in flight; a second one after
    the signal window stops it at once, long before the kill deadline (600 s here): exit 130."""
    process, ready = _serve(trained, TT_ECHO_SERVE_STOP="second", TT_SERVE_KILL_SECONDS="600",
                            TT_SIGNAL_WINDOW_SECONDS="0.2")
    try:
        process.send_signal(signal.SIGINT)
        _log_line(process, "stop request 1 received")  # the server got it and is still up
        assert alive(ready["pid"])
        time.sleep(0.3)  # past tt's 0.2 s signal window: the next Ctrl-C is a second request, not a copy
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=120) == 130
        wait_until(lambda: not alive(ready["pid"]), "the server to be gone")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_server_that_ignores_the_stop_is_killed_after_the_grace(trained):
    """TT_SERVE_KILL_SECONDS=2 in place of the 30 s: a server that ignores every stop is killed (its group)
    once the grace has passed after the first signal, not before it; tt exits 130."""
    process, ready = _serve(trained, TT_ECHO_SERVE_STOP="ignore", TT_SERVE_KILL_SECONDS="2")
    try:
        signalled = time.monotonic()
        process.send_signal(signal.SIGTERM)
        _log_line(process, "stop request 1 received")
        assert process.wait(timeout=120) == 130
        assert time.monotonic() - signalled >= 2
        wait_until(lambda: not alive(ready["pid"]), "the killed server to be gone")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def _spec(tmp_path: Path, steps: int) -> tuple[Path, Path]:
    return write_spec(tmp_path / "s", echo_spec(steps=steps, step_seconds=0.05)), tmp_path / "run"


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (Debian: apt-get install tmux)")
def test_closing_a_tmux_session_stops_the_run_and_it_resumes_from_its_checkpoint(tt, tmp_path):
    """`tmux kill-session` hangs up on `tt` (SIGHUP): tt dies of it, the stage goes (no stage outlives its
    session's end) and `tt run --resume` goes on from the last checkpoint to the end."""
    spec, run = _spec(tmp_path, steps=100)
    socket_name = f"tt-test-{os.getpid()}"
    env = {k: v for k, v in tt.env.items() if k != "TMUX"}
    command = " ".join([TT_BIN, "run", str(spec), "--resume", str(run)])
    subprocess.run(["tmux", "-L", socket_name, "new-session", "-d", "-s", "train", "-x", "80", "-y", "24", command],
                   env=env, check=True, timeout=60)
    try:
        wait_until(lambda: train_step(run) >= 1, "the first training step", timeout=300)
        (stage,) = stage_pids(run)
        subprocess.run(["tmux", "-L", socket_name, "kill-session", "-t", "train"], env=env, check=True, timeout=60)
        wait_until(lambda: not alive(stage), "the stage to end after the hang-up", timeout=300)
    finally:
        subprocess.run(["tmux", "-L", socket_name, "kill-server"], env=env, timeout=60, capture_output=True)
    saved = json.loads((run / "train" / "state.json").read_text())["step"]
    assert 1 <= saved < 100, saved  # the run was stopped by the hang-up, not finished
    code, out = tt.json("run", spec, "--resume", run)
    assert code == 0 and out["status"] == "completed", out
    assert f"resuming at step {saved}" in (run / "logs" / "train.log").read_text()


def test_under_nohup_sighup_changes_nothing(tt, tmp_path):
    """Under `nohup` tt keeps SIGHUP ignored: a hang-up leaves the run training; SIGTERM still stops it (130)."""
    spec, run = _spec(tmp_path, steps=100000)
    process = subprocess.Popen(["nohup", TT_BIN, "run", str(spec), "--resume", str(run)], env=tt.env, cwd=tmp_path,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: train_step(run) >= 1 or process.poll() is not None, "the first training step")
        assert process.poll() is None
        os.kill(process.pid, signal.SIGHUP)
        before = train_step(run)
        wait_until(lambda: train_step(run) >= before + 2 or process.poll() is not None, "two more training steps")
        assert process.poll() is None, "tt died of SIGHUP under nohup"
        send_and_wait_taken(process.pid, signal.SIGTERM)
        assert process.wait(timeout=120) == 130
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
