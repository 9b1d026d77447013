"""The warm stage server (TT_STAGE_SERVER=1, issue 52 item 3; docs/operations.md "Stage server") on the adapter
engine through the real `tt`, a tiny base model on CPU: served stages write the results plain ones write; a stop
to the stage's group mid-stage interrupts the run as on the plain path, and the run resumes; a killed launcher
takes its stage with it; a killed server stops its stage and the run resumes to an unbroken run's bytes; a killed
`tt` leaves no launcher, server or stage (read in /proc), and spares those of a second `tt` running beside it; the
server has no socket with a path, only the pairs `tt` made."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from adapter_support import TT_BIN, engine_python, shared_tiny_model, tt_env, write_spec
from process_support import wait_until

SERVED = {"TT_STAGE_SERVER": "1"}


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("stage-server")
    engine_python(home)
    return home


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Iterator[Path]:
    with shared_tiny_model(tmp_path_factory) as model:
        yield model


def run_tt(home: Path, *args, extra: dict | None = None, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([TT_BIN, *map(str, args)], env={**tt_env(home), **(extra or {})}, cwd=home,
                          capture_output=True, text=True, timeout=timeout)


@contextmanager
def popen_tt(home: Path, *args, extra: dict | None = None) -> Iterator[subprocess.Popen]:
    """`tt` running; killed if the test fails while it runs (its launcher and server then end: the last test)."""
    proc = subprocess.Popen([TT_BIN, *map(str, args)], env={**tt_env(home), **(extra or {})}, cwd=home,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@contextmanager
def held_in_training(home: Path, spec: Path, run: Path, served: bool = True) -> Iterator[subprocess.Popen]:
    """`tt run` of `spec` into `run` (through the server when `served`), its train stage held after step 2
    (TT_HOLD_AT_STEP: it waits there for a stop, so the run cannot end before the test's signal); yields `tt`."""
    extra = {**(SERVED if served else {}), "TT_HOLD_AT_STEP": "2"}
    with popen_tt(home, "run", spec, "--resume", run, extra=extra) as proc:
        wait_until(lambda: train_step(run) >= 2 or proc.poll() is not None, "two training steps", timeout=600)
        assert proc.poll() is None, proc.stderr.read()[-3000:]
        yield proc


def processes() -> dict[int, tuple[str, dict[str, str], int]]:
    """Every process we may read: its command line, environment (as it was started) and parent pid."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            env = dict(item.split("=", 1) for item in (entry / "environ").read_bytes().decode(errors="replace")
                       .split("\0") if "=" in item)
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        found[int(entry.name)] = (cmd, env, parent)
    return found


def started_by(host: int) -> dict[str, list[int]]:
    """The launchers, servers and served stages whose host is `host` (TT_HOST_PID). A served stage is a fork of its
    server: its command line and start environment in /proc are the server's, its parent is the server."""
    kinds: dict[str, list[int]] = {"launcher": [], "server": [], "stage": []}
    table = processes()
    for pid, (cmd, env, parent) in table.items():
        if env.get("TT_HOST_PID") != str(host):
            continue
        if "tt_stagekit.stagelaunch" in cmd:
            kinds["launcher"].append(pid)
        elif "tt_stagekit.stageserver" in cmd:
            kinds["stage" if "tt_stagekit.stageserver" in table.get(parent, ("",))[0] else "server"].append(pid)
    return kinds


def train_step(run: Path) -> int:
    steps = [json.loads(line).get("step") or 0 for line in (run / "logs" / "train.log").read_text().splitlines()
             if line.startswith("{") and '"progress"' in line] if (run / "logs" / "train.log").exists() else []
    return max(steps, default=0)


def comparable(result: dict, run: Path) -> dict:
    """A result.json with the run folder spelled out and wall times left out."""
    text = json.dumps(result).replace(str(run), "RUN")
    body = json.loads(text)
    body["metrics"] = {k: v for k, v in body.get("metrics", {}).items() if not any(w in k for w in ("seconds", "per_second", "peak_"))}
    body.pop("series", None)
    return body


def test_served_stages_write_the_same_results(home, model):
    """The same spec, plain and served: every stage's result.json (less wall times), predictions and adapter
    weights are the same; the served run's stages went through the server (prefetch, not on its list, was
    refused and started on its own)."""
    runs = {}
    for name, extra in (("plain", {}), ("served", SERVED)):
        spec = write_spec(home / name, str(model), hyperparameters={"n_epochs": 1})
        run = home / name / "run"
        proc = run_tt(home, "run", spec, "--resume", run, extra=extra)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        runs[name] = run
    plain, served = runs["plain"], runs["served"]
    server_log = (served / "logs" / "stage-server.log").read_text()
    assert "tt_engine_adapter.stages.warm imported, serving 5 stage modules" in server_log, server_log
    assert not (plain / "logs" / "stage-server.log").exists()
    for stage in ("prefetch", "prepare"):
        assert "the server refused the stage" in (served / "logs" / f"{stage}.log").read_text()
    for stage in ("train", "candidate"):  # (baseline is reused from the first run's baseline cache)
        assert "forked by the warm server" in (served / "logs" / f"{stage}.log").read_text(), stage
    state = json.loads((served / "run.json").read_text())["stages"]
    for stage in ("prefetch", "prepare", "baseline", "train", "candidate"):
        assert state[stage]["state"] == "completed", state
        want = json.loads((plain / stage / "result.json").read_text())
        got = json.loads((served / stage / "result.json").read_text())
        assert comparable(got, served) == comparable(want, plain), stage
    for name in ("baseline/predictions.jsonl", "candidate/predictions.jsonl"):
        assert (served / name).read_bytes() == (plain / name).read_bytes(), name
    weights = [p.relative_to(plain) for p in plain.glob("train/**/adapter_model.safetensors")]
    assert weights
    for path in weights:
        assert (served / path).read_bytes() == (plain / path).read_bytes(), path


@pytest.mark.parametrize("mode", ["plain", "served"])
def test_sigterm_to_the_stage_group_interrupts_and_resumes(home, model, mode):
    """SIGTERM to the train stage's process group (a supervisor's stop) while it runs: the stage saves, the run
    ends 130, interrupted, as on the plain path; resumed, it completes from the saved step."""
    spec = write_spec(home / f"stop-{mode}", str(model), hyperparameters={"n_epochs": 2})
    run = home / f"stop-{mode}" / "run"
    with held_in_training(home, spec, run, served=mode == "served") as proc:
        kinds = started_by(proc.pid)
        if mode == "served":
            (group,), (_,) = kinds["launcher"], kinds["stage"]
        else:
            (group,) = [pid for pid, (cmd, env, _) in processes().items()
                        if env.get("TT_HOST_PID") == str(proc.pid) and "tt_engine_adapter.stages.train" in cmd]
            assert not any(kinds.values()), kinds
        os.killpg(group, signal.SIGTERM)
        assert proc.wait(timeout=300) == 130, proc.stderr.read()
        state = json.loads((run / "run.json").read_text())
        assert state["status"] == "interrupted" and state["stages"]["train"]["state"] == "interrupted"
        wait_until(lambda: not any(started_by(proc.pid).values()), "the stage and server to end", timeout=60)
        resumed = run_tt(home, "run", spec, "--resume", run, extra=SERVED if mode == "served" else {})
        assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
        assert "resum" in (run / "logs" / "train.log").read_text()


def test_killed_launcher_kills_its_stage(home, model):
    """SIGKILL to the launcher (what the host's kill after the grace period is): the server kills the stage."""
    spec = write_spec(home / "launcher", str(model), hyperparameters={"n_epochs": 2})
    run = home / "launcher" / "run"
    with held_in_training(home, spec, run) as proc:
        kinds = started_by(proc.pid)
        (launcher,), (stage,) = kinds["launcher"], kinds["stage"]
        os.kill(launcher, signal.SIGKILL)
        wait_until(lambda: not Path(f"/proc/{stage}").exists(), "the served stage to be killed", timeout=30)
        assert proc.wait(timeout=120) == 1
        assert json.loads((run / "run.json").read_text())["stages"]["train"]["state"] == "failed"


def test_a_killed_server_stops_its_stage_and_the_run_resumes_to_the_bytes_of_an_unbroken_run(home, model):
    """SIGKILL to the stage server mid-train (a crash): the served stage's parent-death signal stops it, the
    run fails naming the stage, nothing it started is left; `tt run --resume` (a new server) completes with the
    adapter an uninterrupted plain run of the same spec writes, byte for byte."""
    runs = {}
    for name in ("unbroken", "crashed"):
        runs[name] = (write_spec(home / f"server-{name}", str(model), hyperparameters={"n_epochs": 2}),
                      home / f"server-{name}" / "run")
    spec, unbroken = runs["unbroken"]
    done = run_tt(home, "run", spec, "--resume", unbroken)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    spec, run = runs["crashed"]
    with held_in_training(home, spec, run) as proc:
        kinds = started_by(proc.pid)
        (server,), (stage,) = kinds["server"], kinds["stage"]
        os.kill(server, signal.SIGKILL)
        wait_until(lambda: not Path(f"/proc/{stage}").exists(), "the served stage to stop", timeout=120)
        assert proc.wait(timeout=300) != 0
        wait_until(lambda: not any(started_by(proc.pid).values()), "launcher and stage to end", timeout=60)
    assert json.loads((run / "run.json").read_text())["stages"]["train"]["state"] in ("failed", "interrupted")
    resumed = run_tt(home, "run", spec, "--resume", run, extra=SERVED)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "forked by the warm server" in (run / "logs" / "train.log").read_text()
    weights = sorted(p.relative_to(unbroken) for p in unbroken.glob("train/**/adapter_model.safetensors"))
    assert weights and weights == sorted(p.relative_to(run) for p in run.glob("train/**/adapter_model.safetensors"))
    for path in weights:
        assert (run / path).read_bytes() == (unbroken / path).read_bytes(), path


def test_two_tt_processes_at_once_each_have_their_own_server_and_a_kill_of_one_spares_the_other(home, model):
    """Two `tt run` processes at once on one TT_HOME and one engine environment (real processes): each starts its
    own server, each served stage is its own host's server's child; SIGKILL to one `tt` mid-train ends what that
    `tt` started and nothing of the other, which completes; the killed run resumed writes the other's adapter,
    byte for byte (the same spec)."""
    runs = {name: (write_spec(home / f"twin-{name}", str(model), hyperparameters={"n_epochs": 2}),
                   home / f"twin-{name}" / "run") for name in ("killed", "spared")}
    (spec_k, run_k), (spec_s, run_s) = runs["killed"], runs["spared"]
    with held_in_training(home, spec_k, run_k) as killed:
        with popen_tt(home, "run", spec_s, "--resume", run_s, extra=SERVED) as spared:
            wait_until(lambda: started_by(spared.pid)["server"] or spared.poll() is not None,
                       "the second tt's server", timeout=300)
            assert spared.poll() is None, spared.stderr.read()
            mine, theirs = started_by(killed.pid), started_by(spared.pid)
            (server_k,), (stage_k,), (server_s,) = mine["server"], mine["stage"], theirs["server"]
            assert server_k != server_s
            assert processes()[stage_k][2] == server_k
            os.kill(killed.pid, signal.SIGKILL)
            killed.wait(timeout=30)
            wait_until(lambda: not any(started_by(killed.pid).values()), "the killed tt's processes to end",
                       timeout=120)
            out, err = spared.communicate(timeout=900)  # (read while it runs: a full pipe would hold it)
            assert spared.returncode == 0, out[-3000:] + err[-3000:]
            wait_until(lambda: not any(started_by(spared.pid).values()), "the spared tt's server to end", timeout=60)
    assert "forked by the warm server" in (run_s / "logs" / "train.log").read_text()
    assert json.loads((run_s / "run.json").read_text())["status"] == "completed"
    resumed = run_tt(home, "run", spec_k, "--resume", run_k, extra=SERVED)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    weights = sorted(p.relative_to(run_s) for p in run_s.glob("train/**/adapter_model.safetensors"))
    assert weights and weights == sorted(p.relative_to(run_k) for p in run_k.glob("train/**/adapter_model.safetensors"))
    for path in weights:
        assert (run_k / path).read_bytes() == (run_s / path).read_bytes(), path


def test_killed_host_leaves_no_server_or_stage(home, model):
    """SIGKILL to `tt` mid-stage: the launcher's parent-death SIGTERM reaches the stage, which saves and exits
    ("tt exited"); then the launcher and the server end: nothing started for that `tt` is left in /proc. While it
    ran, the server held no socket with a path (only unnamed pairs) and was started with -P."""
    spec = write_spec(home / "host", str(model), hyperparameters={"n_epochs": 2})
    run = home / "host" / "run"
    with held_in_training(home, spec, run) as proc:
        kinds = started_by(proc.pid)
        assert len(kinds["launcher"]) == len(kinds["server"]) == len(kinds["stage"]) == 1, kinds
        (server,) = kinds["server"]
        assert " -P -m tt_stagekit.stageserver " in processes()[server][0]
        assert unix_paths(server) == [], "the server holds a socket with a path"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        wait_until(lambda: not any(started_by(proc.pid).values()), "launcher, server and stage to end", timeout=120)
        assert "tt exited" in (run / "logs" / "train.log").read_text()


def unix_paths(pid: int) -> list[str]:
    """The paths of the unix sockets process `pid` holds ('' for an unnamed one is left out)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    paths = []
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 7 and fields[6] in inodes and len(fields) > 7:
            paths.append(fields[7])
    return paths
