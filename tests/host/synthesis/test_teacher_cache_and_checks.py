"""What a teacher or a shipped cache hands back is checked, never trusted (docs/synthesis.md): the real `tt`, real
HTTP teachers on loopback (tests/teacher_stub.py, tests/hostile_teacher.py), the real cache on disk.

A cache entry that does not hash to its name is ignored, named and asked again, and the cache folder is made
private; deeply nested JSON fails the stage cleanly (run.json says failed, never running); a `checks.regex` that
backtracks is cut off by its time limit, and Ctrl-C ends the stage while it runs."""

from __future__ import annotations

import json
import signal
import stat
import time
from pathlib import Path

from conftest import echo_spec, write_spec
from hostile_teacher import HostileTeacher
from process_support import wait_until
from teacher_stub import StubTeacher

SLOW = "a" * 60 + "!"  # (a|aa)+ tries every split of the a's before failing: longer than any test


def teacher_spec(url: str, rows: int = 4, **synthesis) -> dict:
    spec = echo_spec(steps=1)
    spec["synthesis"] = {"teacher": {"base_url": url, "model": "stub-teacher"}, "rows": rows,
                         "inputs_per_request": 4, **synthesis}
    return spec


def entries(spec_dir: Path) -> list[Path]:
    return sorted((spec_dir / ".tuned-tensor" / "synthesis-cache").rglob("*.json"))


def test_a_planted_cache_entry_is_ignored_named_and_asked_again(tt, tmp_path):
    with StubTeacher() as stub:
        path = write_spec(tmp_path / "s", teacher_spec(stub.url))
        code, first = tt.json("run", path)
        assert code == 0, first
        cache = tmp_path / "s" / ".tuned-tensor" / "synthesis-cache"
        one, two = entries(tmp_path / "s")[:2]
        texts = one.read_bytes(), two.read_bytes()
        one.write_bytes(texts[1])  # each now answers the other's request: a planted answer
        two.write_bytes(texts[0])
        cache.chmod(0o755)  # as a shipped project would unpack it
        sent = len(stub.requests)
        proc = tt("run", path, "--json")
        assert proc.returncode == 0, proc.stderr
        again = stub.requests[sent:]
    assert len(again) == 2  # exactly the two planted entries were asked again
    for entry in (one, two):
        assert f"synthesis cache: {entry} ignored (its request does not hash to its name); asking the teacher again" \
            in proc.stderr
    second = json.loads(proc.stdout)
    assert (Path(second["run_dir"]) / "synthesize" / "rows.jsonl").read_bytes() == \
        (Path(first["run_dir"]) / "synthesize" / "rows.jsonl").read_bytes()
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700


def test_deeply_nested_json_fails_the_stage_cleanly(tt, tmp_path):
    with HostileTeacher("deep") as teacher:
        code, out = tt.json("run", write_spec(tmp_path / "s", teacher_spec(teacher.url, max_retries=0)))
    assert code == 1, out
    assert "the body is JSON nested deeper than 64 levels" in out["error"]["message"] and "Traceback" not in out["error"]["message"]
    state = json.loads((Path(out["run_dir"]) / "run.json").read_text())
    assert state["stages"]["synthesize"]["state"] == "failed" and state["status"] != "running"
    # a well-formed answer whose content nests deep: not a list of inputs, dropped, never a RecursionError
    with HostileTeacher("deep_content") as teacher:
        spec = teacher_spec(teacher.url, checks={"valid_json": True})
        code, out = tt.json("run", write_spec(tmp_path / "content", spec))
    assert code == 1 and "dropped: bad_input_reply 3" in out["error"]["message"], out
    state = json.loads((Path(out["run_dir"]) / "run.json").read_text())
    assert state["stages"]["synthesize"]["state"] == "failed" and state["status"] != "running"


def test_a_backtracking_regex_is_cut_off_and_dropped(tt, tmp_path):
    with StubTeacher(answer=lambda prompt: SLOW) as stub:
        spec = teacher_spec(stub.url, rows=1, max_requests=3, checks={"regex": "(a|aa)+"})
        started = time.monotonic()
        code, out = tt.json("run", write_spec(tmp_path / "s", spec))
    assert code == 1 and "dropped: regex_timeout 2" in out["error"]["message"], out
    assert time.monotonic() - started < 60


def test_ctrl_c_interrupts_a_running_regex(tt, tmp_path):
    with StubTeacher(answer=lambda prompt: SLOW) as stub:
        spec = teacher_spec(stub.url, rows=1, checks={"regex": "(a|aa)+"})
        proc = tt.popen("run", write_spec(tmp_path / "s", spec), "--json")
        try:
            wait_until(lambda: stub.answered >= 2 or proc.poll() is not None, "the teacher to answer an answer request")
            time.sleep(0.5)  # the answer is in the regex now
            assert proc.poll() is None, proc.stderr.read()
            sent = time.monotonic()
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=30) == 130, proc.stderr.read()
            took = time.monotonic() - sent
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert took < 4.0, took  # well before the regex's own 5 s limit, let alone its end
    out = json.loads(proc.stdout.read())
    state = json.loads((Path(out["run_dir"]) / "run.json").read_text())
    assert state["stages"]["synthesize"]["state"] == "interrupted"


def test_a_linked_cache_folder_is_refused_and_nothing_lands_where_it_points(tt, tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    with StubTeacher() as stub:
        path = write_spec(tmp_path / "s", teacher_spec(stub.url))
        (tmp_path / "s" / ".tuned-tensor").mkdir()
        (tmp_path / "s" / ".tuned-tensor" / "synthesis-cache").symlink_to(outside)
        code, out = tt.json("run", path)
        assert stub.requests == []
    assert code == 2 and "synthesis-cache: the synthesis cache must be a plain folder, not a link" in out["error"]["message"], out
    assert list(outside.iterdir()) == []
