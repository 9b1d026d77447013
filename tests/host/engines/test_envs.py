"""Hashed engine environments: distinct keys, key changes, interrupted builds, offline builds, gc, runtime groups only."""

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from conftest import echo_spec, write_spec
from plugin_site import add_distribution, copy_echo
from process_support import alive, wait_until

from tt_host.engines.uv import uv_binary


def copy_engine(tmp_path: Path, tt, name="echo"):
    """A private copy of the echo engine whose uv.lock the test may edit."""
    source = copy_echo(tmp_path / "engines" / name)
    site = add_distribution(tmp_path / "site-copy", "tt-engine-echo", "0.1.0", {"echo": "tt_engine_echo.plugin"})
    tt.env["PYTHONPATH"] = os.pathsep.join([str(site), str(source)])
    return source


def echo_entry(listing: dict) -> dict:
    return next(e for e in listing["engines"] if e["name"] == "echo")


def keys(tt) -> dict[str, str]:
    code, listing = tt.json("engines", "list")
    assert code == 0
    return {e["name"]: e["env_key"] for e in listing["engines"]}


def test_keys_are_distinct_and_one_lock_byte_changes_only_that_engine(tt, tmp_path):
    source = copy_engine(tmp_path, tt)
    # Engines installed in the host environment (foundation, adapter) are listed too and must keep their keys.
    before = keys(tt)
    assert len(set(before.values())) == len(before)
    lock = source / "uv.lock"
    lock.write_bytes(lock.read_bytes() + b"\n")
    after = keys(tt)
    assert after["echo"] != before["echo"]
    assert {k: v for k, v in after.items() if k != "echo"} == {k: v for k, v in before.items() if k != "echo"}


@contextlib.contextmanager
def uv_cache_held(cache: Path):
    """Hold uv's cache lock: a build tt starts waits inside uv until the block ends (an event, not a race)."""
    cache.mkdir(parents=True, exist_ok=True)
    fd = os.open(cache / ".lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def uv_building(env_path: Path) -> list[int]:
    """Pids of live uv processes building `env_path` (found through /proc)."""
    marker = f"UV_PROJECT_ENVIRONMENT={env_path}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker in (entry / "environ").read_bytes().split(b"\0") and alive(int(entry.name)):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def waiting_for_a_lock(pid: int) -> bool:
    """True while `pid` is blocked on a file lock (a `->` line in /proc/locks)."""
    return any(line.split()[1] == "->" and line.split()[5] == str(pid)
               for line in Path("/proc/locks").read_text().splitlines() if len(line.split()) > 5)


def test_sigkill_during_build_kills_uv_leaves_nothing_used_and_next_prepare_rebuilds(tt, tmp_path):
    """uv waits on its cache lock (held here), so the build cannot finish first: SIGKILL to tt takes its uv
    with it (PR_SET_PDEATHSIG; otherwise uv would wait forever), nothing is used, the next prepare rebuilds."""
    tt.env["TT_ENVS_DIR"] = str(tmp_path / "envs")
    tt.env["UV_CACHE_DIR"] = str(tmp_path / "uv-cache")
    code, listing = tt.json("engines", "list")
    env_path = Path(echo_entry(listing)["env_path"])
    with uv_cache_held(tmp_path / "uv-cache"):
        proc = tt.popen("engines", "prepare", "echo")
        uv = wait_until(lambda: uv_building(env_path), "tt to start uv")
        wait_until(lambda: any(waiting_for_a_lock(pid) for pid in uv), "uv to wait on the held cache lock")
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        wait_until(lambda: not any(alive(pid) for pid in uv), "uv to die with tt", timeout=30)
    assert not (env_path / ".tt-env-complete.json").exists()
    code, listing = tt.json("engines", "list")
    assert echo_entry(listing)["env_ready"] is False
    code, built = tt.json("engines", "prepare", "echo")
    assert code == 0 and built["built"] is True, built
    assert (env_path / ".tt-env-complete.json").exists()
    check = subprocess.run([built["python"], "-c", "import six, tt_engine_echo"], capture_output=True)
    assert check.returncode == 0, check.stderr
    code, again = tt.json("engines", "prepare", "echo")
    assert again["built"] is False


def test_two_prepares_at_once_build_the_environment_once(tt, tmp_path):
    """The second `tt engines prepare` waits on the environment's build lock while the first builds (held
    inside uv by the cache lock), then finds the environment ready: one build, one uv."""
    tt.env["TT_ENVS_DIR"] = str(tmp_path / "envs")
    tt.env["UV_CACHE_DIR"] = str(tmp_path / "uv-cache")
    code, listing = tt.json("engines", "list")
    env_path = Path(echo_entry(listing)["env_path"])
    with uv_cache_held(tmp_path / "uv-cache"):
        first = tt.popen("engines", "prepare", "echo", "--json")
        uv = wait_until(lambda: uv_building(env_path), "the first prepare to start uv")
        second = tt.popen("engines", "prepare", "echo", "--json")
        wait_until(lambda: waiting_for_a_lock(second.pid), "the second prepare to wait on the build lock")
        assert uv_building(env_path) == uv and first.poll() is None
    outs = [json.loads(p.communicate(timeout=300)[0]) for p in (first, second)]
    assert [p.returncode for p in (first, second)] == [0, 0], outs
    assert [o["built"] for o in outs] == [True, False], outs
    assert outs[0]["python"] == outs[1]["python"]


def test_offline_build_uses_only_uv_cache(tt, tmp_path):
    tt.env["UV_CACHE_DIR"] = str(tmp_path / "uv-cache")
    tt.env["TT_ENVS_DIR"] = str(tmp_path / "envs-online")
    assert tt("engines", "prepare", "echo").returncode == 0
    tt.env["TT_ENVS_DIR"] = str(tmp_path / "envs-offline")
    code, out = tt.json("engines", "prepare", "echo", "--offline")
    assert code == 0 and out["built"], out
    tt.env["UV_CACHE_DIR"] = str(tmp_path / "empty-cache")
    tt.env["TT_ENVS_DIR"] = str(tmp_path / "envs-nothing")
    code, out = tt.json("engines", "prepare", "echo", "--offline")
    assert code == 1 and "offline" in out["error"]["message"].lower(), out
    assert not list(Path(tt.env["TT_ENVS_DIR"]).glob("*/.tt-env-complete.json"))


def _tt_made(folder: Path, key: str) -> Path:
    """A folder as tt leaves an environment: bin/, and the complete-marker naming its key."""
    (folder / "bin").mkdir(parents=True)
    (folder / "bin" / "python").write_bytes(b"x" * 40_000)
    (folder / ".tt-env-complete.json").write_text(json.dumps({"engine": "echo", "key": key}))
    return folder


def test_gc_removes_only_environments_tt_made_and_nobody_uses(tt, tmp_path):
    """Only tt-made (marker), unused (lock), non-current environments go; a dry run by default off a terminal;
    it says what it freed; a running `tt run` keeps its environment even when no installed engine names it."""
    envs = tmp_path / "envs"
    tt.env["TT_ENVS_DIR"] = str(envs)
    assert tt("engines", "prepare", "echo").returncode == 0
    (current,) = [p for p in envs.iterdir() if p.is_dir()]
    stale = _tt_made(envs / "echo-0123456789abcdef", "0123456789abcdef")
    foreign = [envs / "my-data", envs / "echo-aaaaaaaaaaaaaaaa"]  # not made by tt: no marker, no build lock
    for folder in foreign:
        (folder / "bin").mkdir(parents=True)
    held = _tt_made(envs / "other-bbbbbbbbbbbbbbbb", "bbbbbbbbbbbbbbbb")  # another checkout's env, in use
    holder = subprocess.Popen([sys.executable, "-c",
                               "import fcntl, os, sys; "  # what a tt using that environment holds
                               f"fd = os.open({str(envs / (held.name + '.lock'))!r}, os.O_RDWR | os.O_CREAT); "
                               "fcntl.flock(fd, fcntl.LOCK_SH); print('held', flush=True); sys.stdin.read()"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=tt.env)
    try:
        assert holder.stdout.readline().strip() == "held"
        code, out = tt.json("engines", "gc")  # not a terminal: a dry run
        assert code == 0 and out["dry_run"] is True and out["would_remove"] == [str(stale)], out
        assert out["removed"] == [] and out["bytes"] >= 40_000 and stale.exists()
        kept = {k["path"]: k["reason"] for k in out["kept"]}
        assert "in use" in kept[str(held)] and "installed engine" in kept[str(current)]
        assert all("not made by tt" in kept[str(f)] for f in foreign)
        proc = tt("engines", "gc")
        assert "would remove" in proc.stdout and "--delete" in proc.stdout and stale.exists()

        code, out = tt.json("engines", "gc", "--delete")
        assert out["removed"] == [str(stale)] and out["freed_bytes"] >= 40_000, out
        assert not stale.exists() and held.exists() and all(f.exists() for f in foreign)
    finally:
        holder.communicate("", timeout=30)
    code, out = tt.json("engines", "gc", "--delete")
    assert out["removed"] == [str(held)]

    # a run in progress holds its environment: gc with the engine uninstalled still keeps it
    spec = write_spec(tmp_path / "s", echo_spec(steps=100000, step_seconds=0.05))  # never ends before the SIGTERM
    run = tt.popen("run", spec, "--resume", tmp_path / "run")
    try:
        wait_until(lambda: (tmp_path / "run" / "train" / "state.json").exists() or run.poll() is not None,
                   "the run to start training")
        assert run.poll() is None, run.stderr.read()
        tt.env["TT_DISABLE_PLUGINS"] = "echo"
        code, out = tt.json("engines", "gc", "--delete")
        assert out["removed"] == [] and "in use" in {k["path"]: k["reason"] for k in out["kept"]}[str(current)], out
    finally:
        run.send_signal(signal.SIGTERM)
        run.communicate(timeout=120)
    code, out = tt.json("engines", "gc", "--delete")
    assert out["removed"] == [str(current)] and not current.exists()


def test_run_uses_a_prepared_environment(tt, tmp_path):
    """`tt run` finds the environment `tt engines prepare` built (same key) and uses it as it is: no rebuild."""
    tt.env["TT_ENVS_DIR"] = str(tmp_path / "envs")
    code, prepared = tt.json("engines", "prepare", "echo")
    assert code == 0, prepared
    code, listing = tt.json("engines", "list")
    entry = echo_entry(listing)
    env_path = Path(entry["env_path"])
    assert entry["env_ready"] and Path(prepared["python"]).is_relative_to(env_path)
    marker = env_path / ".tt-env-complete.json"
    before = (marker.read_bytes(), marker.stat().st_mtime_ns, env_path.stat().st_ino)
    path = write_spec(tmp_path / "s", echo_spec(steps=1))
    _, valid = tt.json("validate", path)
    trained = len(echo_spec(steps=1)["examples"]) - len(valid["held_out"])  # the examples the split trains on
    proc = tt("run", path, "--resume", tmp_path / "run", "--json")
    out = json.loads(proc.stdout)
    assert proc.returncode == 0 and out["report"]["metrics"]["prepare.rows"] == trained, out
    assert json.loads((tmp_path / "run" / "run.json").read_text())["env_key"] == entry["env_key"]
    assert (marker.read_bytes(), marker.stat().st_mtime_ns, env_path.stat().st_ino) == before, "rebuilt"
    assert "built environment" not in proc.stderr + proc.stdout
    assert sorted(p.name for p in (tmp_path / "envs").iterdir() if not p.name.endswith(".lock")) == [env_path.name]


def test_environment_gets_the_runtime_groups_never_the_default_dev_group(tt):
    code, built = tt.json("engines", "prepare", "echo")
    assert code == 0, built
    listing = subprocess.run([uv_binary(), "pip", "list", "--python", built["python"], "--format", "json"],
                             capture_output=True, text=True, check=True).stdout
    names = {row["name"].lower() for row in json.loads(listing)}
    assert {"six", "tt-engine-echo"} <= names  # the runtime group and the engine itself
    assert "pytest" not in names, sorted(names)  # echo's `dev` group
