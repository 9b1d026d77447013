"""tt_stagekit.protocol, the stage side of the protocol both engines share (stdlib only, so tested here).

The engines' own suites run it inside real stages; these tests pin the parts whose failure modes
are hard to reach through a stage: publishing a folder, one-shot commands, request defaults and
the second signal.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from process_support import alive, process_state, send_and_wait_taken, wait_until
from tt_stagekit import files as F
from tt_stagekit import protocol as P
from tt_stagekit import signals as S


def test_new_folder_publishes_every_file_at_once(tmp_path):
    target = tmp_path / "out"
    with F.new_folder(target) as building:
        (building / "a.txt").write_text("a")
        (building / "sub").mkdir()
        (building / "sub" / "b.txt").write_text("b")
        assert not target.exists()
    assert (target / "a.txt").read_text() == "a" and (target / "sub" / "b.txt").read_text() == "b"
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_new_folder_never_overwrites_and_cleans_up(tmp_path):
    target = tmp_path / "out"
    with pytest.raises(P.InvalidInput, match="appeared while it was being written"):
        with F.new_folder(target) as building:
            (building / "a.txt").write_text("mine")
            target.mkdir()
            (target / "theirs.txt").write_text("keep")
    assert [p.name for p in target.iterdir()] == ["theirs.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["out"]

    with pytest.raises(RuntimeError):
        with F.new_folder(tmp_path / "other") as building:
            (building / "half.txt").write_text("x")
            raise RuntimeError("crash while writing")
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_run_command_maps_errors_to_exit_codes(tmp_path, capsys):
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"x": 1}))

    assert P.run_command(lambda r: f"done {r['x']}", [str(request)], "cmd REQUEST") == P.EXIT_OK
    assert P.run_command(lambda r: "", [], "cmd REQUEST") == P.EXIT_INVALID
    assert P.run_command(lambda r: "", [str(tmp_path / "missing.json")], "cmd REQUEST") == P.EXIT_INVALID

    def refuse(r):
        raise P.InvalidInput("out: already exists")

    def fail(r):
        raise P.StageError("disk full")

    def crash(r):
        raise KeyError("bug")

    assert P.run_command(refuse, [str(request)], "cmd") == P.EXIT_INVALID
    assert P.run_command(fail, [str(request)], "cmd") == P.EXIT_FAILED
    assert P.run_command(crash, [str(request)], "cmd") == P.EXIT_FAILED
    captured = capsys.readouterr()
    events = [json.loads(line) for line in captured.out.splitlines()]
    assert events[0] == {"type": "log", "level": "info", "message": "done 1"}
    assert {"type": "log", "level": "error", "message": "out: already exists"} in events
    assert "Traceback" in captured.err and "KeyError" in captured.err


def test_read_request_names_the_missing_field_and_fills_defaults(tmp_path):
    path = tmp_path / "request.json"
    path.write_text(json.dumps({"run_dir": str(tmp_path), "stage_dir": str(tmp_path / "s"), "spec": {}}))
    with pytest.raises(P.InvalidInput, match="'result_path' is missing"):
        P.read_request([str(path)])
    path.write_text("{\n  bad")
    with pytest.raises(P.InvalidInput, match=r"request.json:2: request is not valid JSON"):
        P.read_request([str(path)])
    path.write_text(json.dumps({"run_dir": str(tmp_path), "stage_dir": str(tmp_path / "s"), "spec": {},
                                "result_path": str(tmp_path / "s" / "result.json")}))
    first, second = P.read_request([str(path)]), P.read_request([str(path)])
    assert first["train_rows"] == [] and first["device"] == "auto" and first["resume"] is False
    first["train_rows"].append("x")
    assert second["train_rows"] == []  # defaults are not shared between requests
    assert (tmp_path / "s").is_dir()


STAGE = """
import os, sys, time
from tt_stagekit import protocol as P

def body(request):
    print("ready", flush=True)
    while not P.stop_requested():
        time.sleep(0.01)
    if sys.argv[2] == "slow-save":  # a step that ends only once the test says every copy has arrived
        while not os.path.exists(sys.argv[3]):
            time.sleep(0.01)
    if sys.argv[2] in ("save", "slow-save"):
        raise P.Interrupted("saved at step 3")
    print("saving", flush=True)
    time.sleep(600)  # a slow save: only a second signal ends it

P.run_main(body, [sys.argv[1]])
"""


WINDOW = 0.8  # TT_SIGNAL_WINDOW_SECONDS for these stages


def start_stage(tmp_path, mode, *args, **env):
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"run_dir": str(tmp_path), "stage_dir": str(tmp_path / "s"), "spec": {},
                                   "result_path": str(tmp_path / "s" / "result.json")}))
    script = tmp_path / "stage.py"
    script.write_text(STAGE)
    proc = subprocess.Popen([sys.executable, str(script), str(request), mode, *map(str, args)],
                            stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "TT_SIGNAL_WINDOW_SECONDS": str(WINDOW), **env})
    assert proc.stdout.readline().strip() == "ready"
    return proc


@pytest.mark.parametrize("mode", ["save", "slow"])
def test_signals_stop_at_a_step_boundary_and_a_second_exits_at_once(tmp_path, mode):
    """"slow": the stage says it is saving once it took the SIGTERM; a SIGINT sent WINDOW after that is after the
    window by the stage's own clock, whatever the load, and ends the 600 s save at once (bound: 60 s)."""
    proc = start_stage(tmp_path, mode)
    try:
        proc.send_signal(signal.SIGTERM)
        if mode == "slow":
            assert proc.stdout.readline().strip() == "saving"
            time.sleep(WINDOW)  # the stage took the first signal before it said so: this one is after the window
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=60) == P.EXIT_INTERRUPTED
        else:
            assert proc.wait(timeout=60) == P.EXIT_INTERRUPTED
            events = [json.loads(line) for line in proc.stdout.read().splitlines()]
            assert events == [{"type": "log", "level": "warning", "message": "saved at step 3"}]
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
    assert not os.path.exists(tmp_path / "s" / "result.json")


def test_copies_of_one_stop_request_stop_once_at_the_step_boundary(tmp_path):
    """A supervisor's SIGTERM, tt's forwarded copy and torchrun's: one request, one clean stop. Each copy is sent
    once the stage has taken the one before, all within the window (30 s here: what is checked is what a copy
    changes, not how fast signals travel); the stage's step ends only after the last one was taken."""
    go = tmp_path / "go"
    proc = start_stage(tmp_path, "slow-save", go, TT_SIGNAL_WINDOW_SECONDS="30")
    for sig in (signal.SIGTERM, signal.SIGTERM, signal.SIGINT, signal.SIGTERM):
        send_and_wait_taken(proc.pid, sig)
    go.touch()
    assert proc.wait(timeout=60) == P.EXIT_INTERRUPTED
    events = [json.loads(line) for line in proc.stdout.read().splitlines()]
    proc.stdout.close()
    assert events == [{"type": "log", "level": "warning", "message": "saved at step 3"}]


COUNTER = """
import sys
from tt_stagekit import protocol as P

def body(request):
    for step in range(1, 6):
        P.progress(step, 5, "step")
        if P.stop_requested():
            raise P.Interrupted(f"stopped at step {step}")
    return {"status": "completed"}

P.run_main(body, [sys.argv[1]])
"""


def test_a_held_stage_waits_at_its_step_until_it_is_stopped(tmp_path):
    """TT_HOLD_AT_STEP=2: a five-step stage that would end in milliseconds waits after reporting step 2; the
    test sees it waiting there, stops it, and it ends at step 2 (tests use this so a run cannot end first)."""
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"run_dir": str(tmp_path), "stage_dir": str(tmp_path / "s"), "spec": {},
                                   "result_path": str(tmp_path / "s" / "result.json")}))
    proc = subprocess.Popen([sys.executable, "-c", COUNTER, str(request)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, P.HOLD_ENV: "2"})
    seen = [json.loads(proc.stdout.readline())["step"] for _ in range(2)]
    assert seen == [1, 2]
    wait_until(lambda: process_state(proc.pid) in ("S", "Z"), "the stage to wait at step 2 (or end)")
    assert proc.poll() is None, "the stage did not wait at step 2"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == P.EXIT_INTERRUPTED
    rest = [json.loads(line) for line in proc.stdout.read().splitlines()]
    proc.stdout.close()
    assert rest == [{"type": "log", "level": "warning", "message": "stopped at step 2"}]


def test_stop_requests_classify_copies_and_a_second_request():
    requests = S.StopRequests(window=1.5)
    assert not requests.requested
    assert requests.receive(now=100.0) == S.FIRST and requests.requested
    assert requests.receive(now=100.0) == S.COPY
    assert requests.receive(now=101.5) == S.COPY  # the window is measured from the first signal
    assert requests.receive(now=101.6) == S.AGAIN
    assert requests.receive(now=200.0) == S.AGAIN
    assert S.StopRequests(window=0).receive(now=1.0) == S.FIRST


def test_window_setting(monkeypatch):
    monkeypatch.setenv("TT_SIGNAL_WINDOW_SECONDS", "0.25")
    assert S.StopRequests().window == 0.25
    monkeypatch.setenv("TT_SIGNAL_WINDOW_SECONDS", "soon")
    assert S.window_seconds() == S.DEFAULT_WINDOW_SECONDS


HOSTED = """
import os, sys, time, subprocess
from tt_stagekit import protocol as P
from tt_stagekit import signals as S

def body(request):
    open(os.path.join(request["run_dir"], "started"), "w").close()  # signal handlers and the host watch are set
    while not P.stop_requested():
        P.progress(1, None, "step")
        time.sleep(0.05)
    raise P.Interrupted(f"saved after {P.STOP.signal_name}")

P.run_main(body, [sys.argv[1]])
"""


HOST = """
import os, subprocess, sys
os.environ.update(TT_HOST_PID=str(os.getpid()), TT_STAGE_LOG=sys.argv[3])
stage = subprocess.Popen([sys.executable, sys.argv[1], sys.argv[2]], stdout=subprocess.PIPE)
print(stage.pid, flush=True)
stage.wait()
"""


def test_a_stage_stops_and_saves_when_its_host_dies(tmp_path):
    """The host (SIGKILLed once the stage runs its loop) dies: the stage gets SIGTERM (parent-death signal),
    stops at its step boundary, and what it writes afterwards lands in its log instead of the closed pipe."""
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"run_dir": str(tmp_path), "stage_dir": str(tmp_path / "s"), "spec": {},
                                   "result_path": str(tmp_path / "s" / "result.json")}))
    (tmp_path / "stage.py").write_text(HOSTED)
    log = tmp_path / "stage.log"
    # The host: starts the stage with its own pid as TT_HOST_PID and the stage's output on a pipe only the
    # host reads (like tt), then is SIGKILLed.
    (tmp_path / "host.py").write_text(HOST)
    host = subprocess.Popen([sys.executable, str(tmp_path / "host.py"), str(tmp_path / "stage.py"), str(request),
                             str(log)], stdout=subprocess.PIPE, text=True)
    stage = int(host.stdout.readline())
    wait_until(lambda: (tmp_path / "started").exists() or not alive(stage), "the stage to start its loop")
    host.kill()
    host.wait()
    # Without the host's death signal the stage would loop forever; 60 s is a generous bound on a loaded machine.
    wait_until(lambda: not alive(stage), "the stage to stop after its host died", timeout=60)
    host.stdout.close()
    assert "saved after SIGTERM (tt exited)" in log.read_text()


SPEAKER = """
from tt_stagekit import protocol as P
P.progress(1, 2, "step", {"loss": 1.0})
P.metrics({"x": 1})
P.artifact("model", "/m")
P.emit({"type": "log", "level": "info", "message": "hello"})
P.emit({"type": "log", "level": "warning", "message": "careful"})
"""


@pytest.mark.parametrize("local_rank", ["0", "1"])
def test_only_a_nodes_first_rank_speaks_the_protocol(local_rank):
    """Under torchrun, LOCAL_RANK 0 emits JSON events on stdout; any other rank emits none: its warnings go to
    stderr as plain text naming the rank (so a 2-process log never holds a second speaker's events)."""
    env = dict(os.environ, LOCAL_RANK=local_rank, RANK=local_rank)
    out = subprocess.run([sys.executable, "-c", SPEAKER], env=env, capture_output=True, text=True, check=True)
    events = [json.loads(line) for line in out.stdout.splitlines()]
    if local_rank == "0":
        assert [e["type"] for e in events] == ["progress", "metrics", "artifact", "log", "log"]
        assert out.stderr == ""
    else:
        assert events == [] and out.stderr == "[rank 1] warning: careful\n"


def test_run_export_says_how_many_files_the_written_folder_holds(tmp_path, capsys):
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"out": str(tmp_path / "out")}))

    def export(r):
        out = Path(r["out"])
        out.mkdir()
        for name in ("model.gguf", "artifact-manifest.json"):
            (out / name).write_text("x")
        return out

    assert P.run_export(export, [str(request)], "cmd REQUEST") == P.EXIT_OK
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["message"] == (
        "export complete: 2 files, listed with sha256 in artifact-manifest.json")
