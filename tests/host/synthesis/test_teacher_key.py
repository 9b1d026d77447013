"""The teacher's key is the user's, never the spec's (docs/synthesis.md "The key"): the real `tt`, a real HTTP
teacher on loopback. A spec naming a variable (`api_key_env`) is refused at validate; `TT_TEACHER_API_KEY` goes only
to the origin `TT_TEACHER_ORIGIN` approves, never over plain http to another host; the run says where the key
came from (or why none is sent) before the first request; and the fields a spec may set are checked at validate."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import echo_spec, write_spec
from teacher_stub import StubTeacher

SECRET = "sk-user-side-0123456789-never-for-the-spec"


def teacher_spec(url: str, **teacher) -> dict:
    spec = echo_spec(steps=1)
    spec["synthesis"] = {"teacher": {"base_url": url, "model": "stub-teacher", **teacher}, "rows": 4,
                         "inputs_per_request": 4}
    return spec


def nothing_created(folder: Path) -> bool:
    return not (folder / ".tuned-tensor").exists()


def test_a_spec_naming_the_key_variable_is_refused_and_names_what_to_set(tt, tmp_path):
    tt.env["HF_TOKEN"] = SECRET
    path = write_spec(tmp_path / "s", teacher_spec("https://collector.example/v1", api_key_env="HF_TOKEN"))
    code, out = tt.json("validate", path)
    assert code == 2, out
    (error,) = out["errors"]
    assert error["loc"] == "synthesis.teacher.api_key_env"
    assert "a spec cannot choose which of your secrets is sent" in error["msg"]
    assert "TT_TEACHER_API_KEY" in error["msg"] and "TT_TEACHER_ORIGIN" in error["msg"]
    run = tt("run", path)
    assert run.returncode == 2 and "synthesis.teacher.api_key_env" in run.stderr, run.stderr
    assert SECRET not in json.dumps(out) + run.stdout + run.stderr and nothing_created(tmp_path / "s")


def test_the_key_goes_only_to_the_approved_origin_and_the_run_says_so_first(tt, tmp_path):
    with StubTeacher() as approved, StubTeacher() as other:
        tt.env["TT_TEACHER_API_KEY"] = SECRET
        tt.env["TT_TEACHER_ORIGIN"] = approved.url.removesuffix("/v1")
        proc = tt("run", write_spec(tmp_path / "other", teacher_spec(other.url)), "--json")
        assert proc.returncode == 0, proc.stderr
        assert set(other.auth) == {None}  # a spec pointing elsewhere gets no key
        port = other.url.split(":")[2].split("/")[0]
        assert (f"teacher: POST {other.url}/chat/completions (model stub-teacher); no key sent: the teacher's origin "
                f"http://127.0.0.1:{port} is not the approved TT_TEACHER_ORIGIN") in proc.stderr
        del tt.env["TT_TEACHER_ORIGIN"]  # a key without an approved origin goes nowhere
        proc = tt("run", write_spec(tmp_path / "unapproved", teacher_spec(approved.url)), "--json")
        assert proc.returncode == 0 and set(approved.auth) == {None}, proc.stderr
        assert "no key sent: TT_TEACHER_API_KEY is set but TT_TEACHER_ORIGIN" in proc.stderr
        tt.env["TT_TEACHER_ORIGIN"] = approved.url.removesuffix("/v1").replace("127.0.0.1", "127.0.0.1") + "/"
        sent = len(approved.auth)
        proc = tt("run", write_spec(tmp_path / "approved", teacher_spec(approved.url)), "--json")
        assert proc.returncode == 0, proc.stderr
        assert set(approved.auth[sent:]) == {f"Bearer {SECRET}"}
        line = next(text for text in proc.stderr.splitlines() if "teacher: POST" in text)
        assert line.endswith("key from TT_TEACHER_API_KEY (sent only to TT_TEACHER_ORIGIN "
                             f"{approved.url.removesuffix('/v1')})")
        assert SECRET not in proc.stdout + proc.stderr


def test_a_key_over_plain_http_to_another_host_is_refused_before_anything(tt, tmp_path):
    tt.env["TT_TEACHER_API_KEY"] = SECRET
    tt.env["TT_TEACHER_ORIGIN"] = "http://teacher.example:8000"
    run = tt("run", write_spec(tmp_path / "s", teacher_spec("http://teacher.example:8000/v1")))
    assert run.returncode == 2 and "refusing to send TT_TEACHER_API_KEY over plain http:// to teacher.example" \
        in run.stderr, run.stderr
    assert nothing_created(tmp_path / "s")
    tt.env["TT_TEACHER_ORIGIN"] = "https://teacher.example/v1"
    run = tt("run", write_spec(tmp_path / "s", teacher_spec("https://teacher.example/v1")))
    assert run.returncode == 2 and "TT_TEACHER_ORIGIN: 'https://teacher.example/v1' is not an origin" in run.stderr
    assert nothing_created(tmp_path / "s")


def test_bad_teacher_fields_are_refused_at_validate_naming_them(tt, tmp_path):
    cases = {
        "space in the URL": ({"base_url": "http://127.0.0.1 :8000/v1"}, "synthesis.teacher.base_url"),
        "non-numeric port": ({"base_url": "http://127.0.0.1:80x0/v1"}, "synthesis.teacher.base_url"),
        "port out of range": ({"base_url": "http://127.0.0.1:99999/v1"}, "synthesis.teacher.base_url"),
        "odd host": ({"base_url": "http://te$acher/v1"}, "synthesis.teacher.base_url"),
        "escape in model": ({"model": "gpt\x1b[2J\x1b]0;owned\x07"}, "synthesis.teacher.model"),
        "bidi in model": ({"model": "gpt\u202e4"}, "synthesis.teacher.model"),
        "catastrophic regex": ({}, "synthesis.checks.regex"),
    }
    for what, (teacher, loc) in cases.items():
        spec = teacher_spec("http://127.0.0.1:8000/v1", **teacher)
        if what == "catastrophic regex":
            spec["synthesis"]["checks"] = {"regex": "(a+)+$"}
        path = write_spec(tmp_path / what.replace(" ", "_"), spec)
        code, out = tt.json("validate", path)
        assert code == 2 and [e["loc"] for e in out["errors"]] == [loc], (what, out)
        run = tt("run", path)
        assert run.returncode == 2 and loc in run.stderr and "Traceback" not in run.stderr, (what, run.stderr)
        assert "\x1b" not in run.stderr and "\u202e" not in run.stderr, what
        assert nothing_created(path.parent), what
