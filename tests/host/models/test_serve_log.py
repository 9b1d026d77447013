"""The server log rotates by size while several real processes append to it, losing no line
(tt_host/models/serve_log.py; docs/serving.md "What the terminal shows")."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
WRITERS, LINES, MAX_BYTES = 4, 1500, 8192

WRITER = '''
import sys, threading
from pathlib import Path
from tt_host.models.serve_log import ServeLog
folder, who, lines, max_bytes, keep = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
with ServeLog(folder, max_bytes=max_bytes, keep=keep) as log:
    def write(stream):  # as tt serve does: the server's stdout and stderr, each read by a thread
        for i in range(lines):
            log.write(f"{who} {stream} line {i:05d} " + "x" * 24 + "\\n")
    threads = [threading.Thread(target=write, args=(s,)) for s in ("out", "err")]
    [t.start() for t in threads]
    [t.join() for t in threads]
'''


def _write_together(folder: Path, keep: int) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(folder), f"w{k}", str(LINES), str(MAX_BYTES),
                               str(keep)], env=env) for k in range(WRITERS)]
    assert [p.wait(timeout=300) for p in procs] == [0] * WRITERS


def test_writers_in_several_processes_rotate_it_by_size_and_lose_no_line(tmp_path):
    folder = tmp_path / "logs"
    _write_together(folder, keep=10_000)  # none removed: every line must be somewhere
    rotated = sorted(folder.glob("serve.log.*[0-9]"), key=lambda p: int(p.suffix[1:]))
    assert len(rotated) > 20, rotated
    lines = [line for path in [folder / "serve.log", *rotated] for line in path.read_text().splitlines()]
    want = {f"w{k} {s} line {i:05d} " + "x" * 24 for k in range(WRITERS) for s in ("out", "err") for i in range(LINES)}
    assert len(lines) == len(want) and set(lines) == want  # each line once, none torn
    longest = max(len(line) + 1 for line in want)
    for path in rotated:  # rotated once it reached the size, never twice for one filling (nor empty)
        assert MAX_BYTES <= path.stat().st_size <= MAX_BYTES + 2 * WRITERS * longest, (path, path.stat().st_size)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert (folder / "serve.log").stat().st_size < MAX_BYTES + 2 * WRITERS * longest


def test_it_keeps_the_newest_files_and_never_writes_through_a_planted_link(tmp_path):
    folder = tmp_path / "logs"
    _write_together(folder, keep=3)
    assert sorted(p.name for p in folder.glob("serve.log*")) == ["serve.log", "serve.log.1", "serve.log.2",
                                                                "serve.log.3", "serve.log.lock"]
    kept = "".join((folder / name).read_text() for name in ("serve.log.3", "serve.log.2", "serve.log.1", "serve.log"))
    assert len(kept) >= 3 * MAX_BYTES and kept.endswith("x" * 24 + "\n")
    assert any(f"w{k} {s} line {LINES - 1:05d}" in kept for k in range(WRITERS) for s in ("out", "err"))  # the end

    target = tmp_path / "elsewhere.txt"
    target.write_text("mine\n")
    (folder / "serve.log").unlink()
    (folder / "serve.log").symlink_to(target)
    _write_together(folder, keep=3)  # every writer gives up its log lines, and exits 0
    assert target.read_text() == "mine\n"


def test_a_log_removed_or_moved_away_by_the_operator_is_created_again_at_the_next_line(tmp_path):
    from tt_host.models.serve_log import ServeLog

    folder = tmp_path / "logs"
    with ServeLog(folder) as log:
        log.write("first\n")
        (folder / "serve.log").rename(tmp_path / "archived.log")  # logrotate's move, or an operator's rm
        log.write("second\n")
    assert (tmp_path / "archived.log").read_text() == "first\n"
    assert (folder / "serve.log").read_text() == "second\n"


def test_a_planted_link_is_refused_with_a_message_and_logs_is_private(tmp_path):
    from tt_host.models.serve_log import ServeLog

    folder = tmp_path / "logs"
    folder.mkdir(mode=0o755)
    target = tmp_path / "elsewhere.txt"
    target.write_text("mine\n")
    (folder / "serve.log").symlink_to(target)
    said: list[str] = []
    with ServeLog(folder, warn=said.append) as log:
        log.write("a line\n")
        log.write("another\n")
    assert target.read_text() == "mine\n"
    assert len(said) == 1 and "the server log is off" in said[0] and "symbolic link" in said[0], said
    assert str(folder / "serve.log") in said[0] and "remove it" in said[0]
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700


def test_a_fifo_at_the_lock_never_blocks_the_writer(tmp_path):
    """A FIFO at serve.log.lock: the writer that rotates would wait for a reader forever. It is refused without
    blocking (a real process that must finish), said once, and the log keeps every line, unrotated."""
    folder = tmp_path / "logs"
    folder.mkdir()
    os.mkfifo(folder / "serve.log.lock")
    script = ("import sys\nfrom pathlib import Path\nfrom tt_host.models.serve_log import ServeLog\n"
              "with ServeLog(Path(sys.argv[1]), max_bytes=100, warn=lambda m: print('WARN', m)) as log:\n"
              "    for i in range(50):\n        log.write(f'line {i:03d} ' + 'x' * 20 + '\\n')\n")
    done = subprocess.run([sys.executable, "-P", "-c", script, str(folder)], capture_output=True, text=True,
                          timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stderr
    warned = [line for line in done.stdout.splitlines() if line.startswith("WARN")]
    assert len(warned) == 1 and "not rotated" in warned[0] and "FIFO" in warned[0], done.stdout
    assert (folder / "serve.log").read_text().count("\n") == 50
    assert not (folder / "serve.log.1").exists()
