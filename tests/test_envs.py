"""Hashed engine environments: distinct keys, key changes, interrupted builds, offline builds, gc, runtime groups only."""

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from conftest import echo_spec, write_spec
from plugin_site import ECHO_SOURCE, add_distribution

from tt_host.envs import uv_binary


def copy_engine(tmp_path: Path, tt, name="echo"):
    """A private copy of the echo engine whose uv.lock the test may edit."""
    source = tmp_path / "engines" / name
    shutil.copytree(ECHO_SOURCE, source, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
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


def test_sigkill_during_build_leaves_nothing_used_and_next_prepare_rebuilds(tt, tmp_path):
    tt.env["TT_ENVS_DIR"] = str(tmp_path / "envs")
    tt.env["UV_CACHE_DIR"] = str(tmp_path / "uv-cache")  # cold cache: the build takes long enough to interrupt
    code, listing = tt.json("engines", "list")
    env_path = Path(echo_entry(listing)["env_path"])
    proc = tt.popen("engines", "prepare", "echo")
    deadline = time.monotonic() + 60
    while not (env_path / "bin" / "python").exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (env_path / ".tt-env-complete.json").exists(), "the build finished before it could be killed"
    code, listing = tt.json("engines", "list")
    assert echo_entry(listing)["env_ready"] is False
    code, built = tt.json("engines", "prepare", "echo")
    assert code == 0 and built["built"] is True, built
    assert (env_path / ".tt-env-complete.json").exists()
    check = subprocess.run([built["python"], "-c", "import six, tt_engine_echo"], capture_output=True)
    assert check.returncode == 0, check.stderr
    code, again = tt.json("engines", "prepare", "echo")
    assert again["built"] is False


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
    assert code == 1 and "offline" in out["error"].lower(), out
    assert not list(Path(tt.env["TT_ENVS_DIR"]).glob("*/.tt-env-complete.json"))


def test_gc_removes_environments_no_engine_uses(tt, tmp_path):
    tt.env["TT_ENVS_DIR"] = str(tmp_path / "envs")
    assert tt("engines", "prepare", "echo").returncode == 0
    stale = tmp_path / "envs" / "echo-0123456789abcdef"
    (stale / "bin").mkdir(parents=True)
    code, out = tt.json("engines", "gc")
    assert out["removed"] == [str(stale)]
    code, listing = tt.json("engines", "list")
    assert echo_entry(listing)["env_ready"] is True


def test_run_uses_a_prepared_environment(tt, tmp_path):
    path = write_spec(tmp_path / "s", echo_spec(steps=1))
    code, out = tt.json("run", path)
    assert code == 0 and out["report"]["metrics"]["prepare.rows"] == 8


def test_environment_gets_the_runtime_groups_never_the_default_dev_group(tt):
    code, built = tt.json("engines", "prepare", "echo")
    assert code == 0, built
    listing = subprocess.run([uv_binary(), "pip", "list", "--python", built["python"], "--format", "json"],
                             capture_output=True, text=True, check=True).stdout
    names = {row["name"].lower() for row in json.loads(listing)}
    assert {"six", "tt-engine-echo"} <= names  # the runtime group and the engine itself
    assert "pytest" not in names, sorted(names)  # echo's `dev` group
