"""Two `tt run --resume R` for a run folder that does not exist yet: the first takes the run lock before it
builds the environment, so the second is refused at once instead of re-creating R after the first finished."""

from __future__ import annotations

import json
import os
import time

from conftest import echo_spec, write_spec
from tt_host.fsutil import FileLock, LockHeld


def _locked(path) -> bool:
    if not path.exists():
        return False
    try:
        FileLock(path).acquire().release()
    except LockHeld:
        return True
    return False


def test_second_resume_is_refused_while_the_first_builds_its_environment(tt, tmp_path):
    code, prepared = tt.json("engines", "prepare", "echo")  # the shared, ready echo environment
    assert code == 0, prepared
    envs = tmp_path / "envs"  # a private env root where the echo environment is not ready yet
    envs.mkdir()
    tt.env["TT_ENVS_DIR"] = str(envs)
    name = os.path.basename(prepared["path"])
    build_lock = FileLock(envs / f"{name}.lock").acquire()  # the first run waits here, as if building
    spec, run = write_spec(tmp_path / "s", echo_spec(steps=2)), tmp_path / "run"
    first = tt.popen("run", spec, "--resume", run, "--json")
    try:
        deadline = time.monotonic() + 60
        while not _locked(run / ".tt-run.lock") and time.monotonic() < deadline and first.poll() is None:
            time.sleep(0.1)
        assert _locked(run / ".tt-run.lock"), "the first run did not lock its run folder before the environment"
        second = tt("run", spec, "--resume", run, "--json", timeout=60)
        assert second.returncode == 2 and "in use by pid" in json.loads(second.stdout)["error"]["message"], second.stdout
        assert not (run / "run.json").exists()
    finally:
        (envs / name).symlink_to(prepared["path"])  # the "build" is done: the environment is ready
        build_lock.release()
    out, _ = first.communicate(timeout=300)
    assert first.returncode == 0 and json.loads(out)["status"] == "completed", out
    created = json.loads((run / "run.json").read_text())["created_at"]
    code, again = tt.json("run", spec, "--resume", run)  # resuming later reuses everything, re-runs nothing
    assert code == 0 and {name: s["this_run"] for name, s in again["report"]["stages"].items()} == {
        "prepare": "reused", "train": "reused", "evaluate": "reused", "baseline": "skipped"}, again  # echo.baseline off
    assert json.loads((run / "run.json").read_text())["created_at"] == created


def test_a_run_that_never_started_leaves_no_folder(tt, tmp_path):
    tt.env["TT_ENVS_DIR"] = str(tmp_path / "envs")
    tt.env["TT_OFFLINE"] = "1"
    tt.env["UV_CACHE_DIR"] = str(tmp_path / "empty-uv-cache")  # offline with an empty cache: the build fails
    run = tmp_path / "run"
    code, out = tt.json("run", write_spec(tmp_path / "s", echo_spec(steps=1)), "--resume", run, timeout=300)
    assert code == 1 and out["status"] == "failed", out
    assert not run.exists()
