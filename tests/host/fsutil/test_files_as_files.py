"""Files opened as files: locks and appends never go through a symbolic link or into a FIFO;
an append after a torn last line (a kill mid-append) keeps the record it appends; a corrupt registry entry,
history line or run.json is named (file, what is wrong, what to do) by every command that reads it, never a
traceback and never a silent skip."""

from __future__ import annotations

import json
import os
import threading

import pytest

from conftest import echo_spec, write_spec
from tt_host.fsutil import FileLock, NotARegularFile, append_line


def test_a_lock_is_never_taken_through_a_link_or_a_fifo(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    link = tmp_path / "link.lock"
    link.symlink_to(victim)
    with pytest.raises(NotARegularFile, match="symbolic link"):
        FileLock(link, holder="me").acquire()
    assert victim.read_text() == "keep me"
    dangling = tmp_path / "dangling.lock"
    dangling.symlink_to(tmp_path / "made-by-following")
    with pytest.raises(NotARegularFile, match="symbolic link"):
        FileLock(dangling).acquire()
    assert not (tmp_path / "made-by-following").exists()
    fifo = tmp_path / "fifo.lock"
    os.mkfifo(fifo)
    opened = threading.Thread(target=lambda: pytest.raises(NotARegularFile, FileLock(fifo).acquire), daemon=True)
    opened.start()
    opened.join(timeout=30)  # an open of a FIFO without O_NONBLOCK would wait here for a writer
    assert not opened.is_alive(), "opening a FIFO as a lock blocked"
    with pytest.raises(NotARegularFile, match="FIFO"):
        append_line(fifo, b"{}\n")


def test_an_append_after_a_torn_line_keeps_its_record(tmp_path):
    history = tmp_path / "h.jsonl"
    history.write_bytes(b'{"n": 1}\n{"n": 2, "to')  # killed mid-append: never a committed record
    append_line(history, b'{"n": 3}\n')
    assert history.read_bytes() == b'{"n": 1}\n{"n": 3}\n'
    history.write_bytes(b'{"n": 1}\n{"n": 2}')  # a whole record that lost only its newline is kept
    append_line(history, b'{"n": 3}')
    assert history.read_bytes() == b'{"n": 1}\n{"n": 2}\n{"n": 3}\n'


def _no_traceback(proc) -> None:
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr


def test_links_torn_lines_and_corrupt_records_through_tt(tt, tmp_path):
    spec, run = write_spec(tmp_path / "s", echo_spec(steps=2)), tmp_path / "run"
    code, out = tt.json("run", spec, "--resume", run)
    assert code == 0, out
    model = out["report"]["models"][0]["id"]
    home = tmp_path / "tt-home"

    # a run lock that is a link to another file: refused, the other file untouched
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (run / ".tt-run.lock").unlink()
    (run / ".tt-run.lock").symlink_to(victim)
    code, out = tt.json("run", spec, "--resume", run)
    assert code == 2 and "symbolic link" in out["error"]["message"] and str(run) in out["error"]["message"], out
    assert victim.read_text() == "keep me"
    (run / ".tt-run.lock").unlink()
    fresh = tmp_path / "fresh"  # a folder holding only such a link is not a folder tt is starting a run in
    fresh.mkdir()
    (fresh / ".tt-run.lock").symlink_to(victim)
    code, out = tt.json("run", spec, "--resume", fresh)
    assert code == 2 and victim.read_text() == "keep me" and not (fresh / "run.json").exists(), out

    # a torn last line in the activation history: the next rollback is not lost in it
    assert tt.json("models", "activate", model, "--force")[0] == 0
    history = home / "activations.jsonl"
    with open(history, "ab") as handle:
        handle.write(b'{"at": "2026-01-01T00:00:00Z", "action": "acti')
    assert tt.json("models", "active")[1]["model"] == model  # the torn line is no record
    code, out = tt.json("models", "rollback")
    assert code == 0 and out["previous"] == model, out
    code, out = tt.json("models", "active")
    assert code == 0 and out["model"] is None and out["base_of"] == model, out
    assert [json.loads(line)["action"] for line in history.read_text().splitlines()] == ["activate", "rollback"]

    # a corrupt history line: named with its line number by every command that reads the history
    text = history.read_text()
    history.write_text(text.replace("\n", "\nnot a record\n", 1))
    for command in (("models", "active"), ("models", "history"), ("models", "rollback"),
                    ("models", "activate", model, "--force"), ("models", "get", model)):
        proc = tt(*command, "--json")
        _no_traceback(proc)
        error = (json.loads(proc.stdout).get("error") or {}).get("message", "")
        assert proc.returncode == 1 and f"{history}:2" in error and "remove that line" in error, (command, error)
    history.write_text(text)

    # a corrupt registry entry: named by list (which still lists the others) and by get
    bad = home / "models" / "broken.json"
    bad.write_text('{"id": "broken", "path": ')
    code, out = tt.json("models", "list")
    assert code == 0 and [m["id"] for m in out["models"]] == [model], out
    assert len(out["problems"]) == 1 and str(bad) in out["problems"][0] and "move it out" in out["problems"][0]
    proc = tt("models", "list")
    _no_traceback(proc)
    assert proc.returncode == 0 and str(bad) in proc.stderr.replace("\n", ""), proc.stderr
    proc = tt("models", "get", "broken", "--json")
    _no_traceback(proc)
    assert proc.returncode == 1 and str(bad) in json.loads(proc.stdout)["error"]["message"], proc.stdout
    bad.unlink()

    # a corrupt run.json: named by runs list, runs get, runs events and run --resume
    (run / "run.json").write_text('{"engine": "echo", "stages": {"train": "x"}}')
    code, out = tt.json("runs", "list", tmp_path)
    assert code == 0 and len(out["problems"]) == 1 and str(run / "run.json") in out["problems"][0], out
    for command in (("runs", "get", run), ("runs", "events", run), ("run", spec, "--resume", run)):
        proc = tt(*command, "--json")
        _no_traceback(proc)
        error = (json.loads(proc.stdout).get("error") or {}).get("message", "")
        assert proc.returncode == 1 and str(run / "run.json") in error and "move" in error, (command, proc.stdout)

    # a corrupt run index record: named by runs list too
    index_record = home / "runs" / "broken-000000000000.json"
    index_record.write_text("{not json")
    code, out = tt.json("runs", "list")
    assert code == 0 and any(str(index_record) in p for p in out["problems"]), out
