"""A full disk is a clear error: one message naming the path and the space needed, run.json
left `failed` (or no run folder made), a report written, exit 1; and whatever a full disk or a kill leaves
while a run folder is being created is never refused by the next `--resume`.

The small disk is a real tmpfs of a few MiB mounted for the test (root only; skipped where mounting is not
allowed), filled with a real file; the kills are strace's fault injection (skipped without strace).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import TT_BIN, echo_spec, write_spec


@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "small-disk"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def fill(disk: Path) -> Path:
    """Write a file until the disk has no byte left; returns it (delete it to free the disk)."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    block = b"\0" * 65536
    try:
        while block:
            try:
                os.write(fd, block)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                block = block[: len(block) // 2]
    finally:
        os.close(fd)
    return filler


def _one_message(out: dict, folder: Path) -> str:
    error = out["error"]["message"]
    assert "no space left on the disk of" in error and str(folder) in error and "bytes" in error, error
    assert "Traceback" not in error and "Errno" not in error, error
    return error


def test_a_run_created_on_a_full_disk_leaves_nothing_a_resume_refuses(tt, small_disk, tmp_path):
    spec = write_spec(tmp_path / "s", echo_spec(steps=2))
    filler = fill(small_disk)
    new, given = small_disk / "new", small_disk / "given"
    given.mkdir()
    for run in (new, given):
        code, out = tt.json("run", spec, "--resume", run)
        assert code == 1 and out["status"] == "failed", out
        _one_message(out, run)
        assert "Nothing was started" in out["error"]["message"], out
        assert not (run / "run.json").exists()
    assert not new.exists()  # the folder tt made is removed again
    filler.unlink()
    for run in (new, given):
        code, out = tt.json("run", spec, "--resume", run)
        assert code == 0 and out["status"] == "completed", out


def test_a_disk_that_fills_during_a_run_leaves_run_json_failed_and_a_report(tt, small_disk, tmp_path):
    spec, run = write_spec(tmp_path / "s", echo_spec(steps=400, step_seconds=0.05)), small_disk / "run"
    proc = tt.popen("run", spec, "--resume", run, "--json")
    deadline = time.monotonic() + 120
    while not (run / "train" / "state.json").exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert (run / "train" / "state.json").exists(), proc.communicate()
    filler = fill(small_disk)
    stdout, stderr = proc.communicate(timeout=300)
    out = json.loads(stdout)
    assert proc.returncode == 1 and out["status"] == "failed", (stdout, stderr)
    _one_message(out, run)
    assert "Traceback" not in stderr, stderr
    state = json.loads((run / "run.json").read_text())
    assert state["status"] == "failed" and "no space left" in state["error"], state
    assert state["stages"]["prepare"]["state"] == "completed" and state["stages"]["train"]["state"] == "failed"
    report = json.loads((run / "report.json").read_text())
    assert "no space left" in report["error"] and "--resume" in report["resume"], report
    assert not (run / ".tt-reserve").exists()
    filler.unlink()
    code, out = tt.json("run", spec, "--resume", run)
    assert code == 0 and out["status"] == "completed", out
    assert out["report"]["stages"]["train"]["this_run"] == "resumed", out


@pytest.mark.parametrize("rename", [1, 2])
def test_a_kill_at_a_rename_of_run_folder_creation_leaves_nothing_a_resume_refuses(tt, tmp_path, rename):
    strace = shutil.which("strace")
    if strace is None:
        pytest.skip("strace is not installed (apt-get install strace)")
    spec, run = write_spec(tmp_path / "s", echo_spec(steps=2)), tmp_path / "run"
    assert tt("engines", "prepare", "echo").returncode == 0  # no rename of the environment's before the run's
    killed = subprocess.run([strace, "-o", os.devnull, "-e", "trace=rename,renameat,renameat2", "-e",
                             f"inject=rename,renameat,renameat2:signal=KILL:when={rename}", TT_BIN, "run", spec,
                             "--resume", run, "--json"], env=tt.env, cwd=tt.cwd, capture_output=True, text=True,
                            timeout=300)
    assert killed.returncode in (-9, 137), (killed.returncode, killed.stdout, killed.stderr)
    assert run.exists() and not (run / "run.json").exists(), sorted(p.name for p in run.iterdir())
    code, out = tt.json("run", spec, "--resume", run)
    assert code == 0 and out["status"] == "completed", out
    assert not [p.name for p in run.iterdir() if p.name.endswith(".tmp")], sorted(p.name for p in run.iterdir())


def test_a_resume_removes_the_temp_files_a_killed_write_left_and_never_follows_a_link(tt, tmp_path):
    """A run killed between an atomic write's temp file and its rename (run.json, spec.json, the reports) leaves
    `.NAME.*.tmp`; the next `--resume` removes each under the run's lock. A planted link with such a name is
    neither followed nor removed, and a file of another name is left alone."""
    spec, run = write_spec(tmp_path / "s", echo_spec(steps=2)), tmp_path / "run"
    code, out = tt.json("run", spec, "--resume", run)
    assert code == 0, out
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    stale = [".run.json.k1ll3d_x.tmp", ".spec.json.abc123de.tmp", ".report.md.zz9_0000.tmp",
             ".report-train-loss.svg.q1w2e3r4.tmp"]
    for name in stale:
        (run / name).write_text("{")
    (run / ".run.json.linked00.tmp").symlink_to(victim)
    (run / "notes.tmp").write_text("mine")
    code, out = tt.json("run", spec, "--resume", run)
    assert code == 0 and out["status"] == "completed", out
    left = sorted(p.name for p in run.iterdir() if p.name.endswith(".tmp"))
    assert left == [".run.json.linked00.tmp", "notes.tmp"], left
    assert victim.read_text() == "keep me"
