"""Every write tt calls atomic is durable: seen in the system calls (strace), not in the code.

A file renamed into place was fsynced under its temporary name first, a folder renamed into place had every file
it holds fsynced first, and the folder of the rename is fsynced after it (tt_stagekit.fsync_trace reads the
trace). Two real processes are traced: one calling each of the shared writers (tt_host.fsutil over
tt_stagekit.files: a file, JSON, a line appended, a folder published refusing, replacing and keeping an old one,
`new_folder`), and a whole `tt run` of the echo engine (spec.json, run.json, the stage requests and the echo
stages' results, the report, the registry entry, the model version's copy, the baseline cache entry). The engines' checkpoint
writers have the same test in their own suites.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import TT_BIN, echo_spec, write_spec
from tt_stagekit.fsync_trace import command, events, undurable

STRACE = shutil.which("strace")
pytestmark = pytest.mark.skipif(STRACE is None, reason="needs strace (Debian: apt-get install strace; .ci/run installs it)")

WRITERS = '''
import sys
from pathlib import Path
from tt_host.fsutil import append_line, write_bytes_atomic, write_json_atomic
from tt_stagekit.files import KEEP, REFUSE, REPLACE, new_folder, publish_folder
root = Path(sys.argv[1])
write_bytes_atomic(root / "a.bin", b"x")
write_json_atomic(root / "b \\u00e9.json", {"a": 1})
append_line(root / "history.jsonl", b"{}")
for n, policy in enumerate((REFUSE, REPLACE, KEEP)):
    built = root / f".built{n}"
    (built / "sub").mkdir(parents=True)
    (built / "w.txt").write_text("w")
    (built / "sub" / "v.txt").write_text("v")
    publish_folder(built, root / "pub", policy, sync_files=True)
with new_folder(root / "nf") as folder:
    (folder / "x.txt").write_text("x")
'''


def renames(log: Path, root: Path) -> list[tuple[str, ...]]:
    return [e for e in events(log.read_text(errors="replace")) if e[0] == "rename" and e[2].startswith(str(root))]


def test_the_shared_writers_fsync_the_file_before_and_the_folder_after_each_rename(tmp_path):
    root, log = tmp_path / "root", tmp_path / "strace.log"
    root.mkdir()
    subprocess.run([*command(log), sys.executable, "-c", WRITERS, str(root)], check=True, timeout=300)
    assert len(renames(log, root)) == 8  # a.bin, b.json, three publishes (two moving the old one aside), nf
    assert undurable(log, root) == []
    assert ("fsync", str(root / "history.jsonl")) in events(log.read_text())  # the appended line


def test_every_rename_of_a_run_is_durable(tt, tmp_path):
    """`tt run` (echo: prepare, train, evaluate, baseline; the model registered), traced whole."""
    spec = write_spec(tmp_path / "project", echo_spec(baseline=True))
    log = tmp_path / "strace.log"
    proc = subprocess.run([*command(log), TT_BIN, "run", str(spec)], env=tt.env, cwd=tt.cwd, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    targets = {Path(e[2]).relative_to(tmp_path).parts[:n] for e in renames(log, tmp_path) for n in (2, 3)}
    names = {Path(e[2]).name for e in renames(log, tmp_path)}
    assert {"spec.json", "run.json", "report.json", "request.json", "result.json"} <= names, sorted(names)
    assert {("tt-home", "models", "versions"), ("tt-home", "baseline-cache")} <= targets, sorted(targets)
    assert undurable(log, tmp_path) == []


def test_the_trace_reader_follows_renameat_unfinished_calls_and_escaped_names(tmp_path):
    """What strace prints for other writers (renameat2 relative to a folder descriptor, a call another thread
    interrupted, octal-escaped names, a failed call) reads as the same events; a rename before the fsync is named."""
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "é.json").write_text("{}")
    (tmp_path / "late").write_text("x")
    trace = tmp_path / "strace.log"
    trace.write_text(
        f'101 fsync(3<{tmp_path}/d/.\\303\\251.tmp>) = 0\n'
        f'102 fsync(4<{tmp_path}/x> <unfinished ...>\n'
        f'101 renameat2(AT_FDCWD</>, "{str(tmp_path)[1:]}/d/.\\303\\251.tmp", 5<{tmp_path}/d>, "\\303\\251.json", '
        f'RENAME_NOREPLACE) = 0\n'
        f'102 <... fsync resumed>) = 0\n'
        f'101 fsync(6<{tmp_path}/d>) = 0\n'
        f'101 rename("{tmp_path}/gone", "{tmp_path}/late") = -1 ENOENT (No such file or directory)\n'
        f'101 rename("{tmp_path}/.late.tmp", "{tmp_path}/late") = 0\n'
        f'101 fsync(3<{tmp_path}/.late.tmp>) = 0\n')
    assert events(trace.read_text())[:3] == [("fsync", f"{tmp_path}/d/.é.tmp"), ("fsync", f"{tmp_path}/x"),
                                             ("rename", f"{tmp_path}/d/.é.tmp", f"{tmp_path}/d/é.json")]
    assert undurable(trace, tmp_path) == [
        f"{tmp_path}/late: renamed from {tmp_path}/.late.tmp before that file was fsynced",
        f"{tmp_path}/late: its folder {tmp_path} was not fsynced after the rename"]
