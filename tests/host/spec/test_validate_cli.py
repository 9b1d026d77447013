"""`tt validate`: strict schema errors with dotted paths, exit codes, and the compiled message."""

import json

import pytest

from conftest import echo_spec, write_spec
from tt_host.spec.split import is_held_out


def test_valid_spec_prints_compiled_message(tt, tmp_path):
    path = write_spec(tmp_path / "s", echo_spec())
    code, out = tt.json("validate", path)
    assert code == 0, out
    assert out["valid"] and out["engine"] == "echo" and out["errors"] == []
    assert out["system_message"] == "Answer with the capital city."
    assert len(out["system_message_sha256"]) == 64
    assert (out["train_count"], out["eval_count"]) == (7, 3)
    held = [e["input"] for e in echo_spec()["examples"] if is_held_out("capitals", e["input"])]
    assert out["held_out"] == held and out["split_salt"] == "capitals"
    human = tt("validate", path)
    assert human.returncode == 0 and "Answer with the capital city." in human.stdout
    assert all(f"- {text}" in human.stdout for text in held)


@pytest.mark.parametrize("mutate,loc", [
    (lambda s: s.update(nmae="x"), "nmae"),
    (lambda s: s["echo"].update(stepz=3), "echo.stepz"),
    (lambda s: s["examples"][1].update(outptu="x"), "examples.1.outptu"),
    (lambda s: s["echo"].update(steps=0), "echo.steps"),
])
def test_misspelled_or_bad_key_names_its_dotted_path(tt, tmp_path, mutate, loc):
    spec = echo_spec()
    mutate(spec)
    path = write_spec(tmp_path / "s", spec)
    code, out = tt.json("validate", path)
    assert code == 2
    assert out["valid"] is False
    assert loc in [e["loc"] for e in out["errors"]], out
    human = tt("validate", path)
    assert human.returncode == 2 and loc in human.stderr
    assert not (tmp_path / "s" / ".tuned-tensor").exists()


def test_unknown_engine_lists_installed(tt, tmp_path):
    spec = echo_spec()
    spec["engine"] = "nope"
    code, out = tt.json("validate", write_spec(tmp_path / "s", spec))
    assert code == 2
    assert "echo" in out["errors"][0]["msg"] and out["errors"][0]["loc"] == "engine"


def test_invalid_json_names_file_and_line(tt, tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{\n  "name": "x",\n  "engine": "echo"\n  "examples": []\n}\n')
    code, out = tt.json("validate", path)
    assert code == 2 and f"{path}:4:" in out["errors"][0]["msg"]


def test_too_few_examples_and_duplicates(tt, tmp_path):
    spec = echo_spec()
    spec["examples"] = spec["examples"][:1]
    code, out = tt.json("validate", write_spec(tmp_path / "a", spec))
    assert code == 2 and out["errors"][0]["loc"] == "examples"
    spec = echo_spec()
    spec["examples"][3]["input"] = "  CAPITAL of country 1? "
    code, out = tt.json("validate", write_spec(tmp_path / "b", spec))
    assert code == 2 and out["errors"][0]["loc"] == "examples.3.input"


def test_run_with_invalid_spec_creates_nothing(tt, tmp_path):
    spec = echo_spec(stepz=1)
    path = write_spec(tmp_path / "s", spec)
    proc = tt("run", path, "--resume", tmp_path / "run")
    assert proc.returncode == 2
    assert not (tmp_path / "run").exists() and not (tmp_path / "s" / ".tuned-tensor").exists()


@pytest.mark.parametrize("name,content,says", [
    ("missing.json", None, "no such file"),
    ("folder", "dir", "is a folder"),
    ("bad.json", '{\n  "name": "x",\n  "engine"\n}\n', "bad.json:4:1: invalid JSON"),
])
def test_doctor_with_unreadable_spec_exits_2_naming_the_file(tt, tmp_path, name, content, says):
    """A spec path doctor cannot read is bad input (exit 2, the file named, nothing created), not a failed check."""
    folder = tmp_path / "d"
    folder.mkdir()
    path = folder / name
    if content == "dir":
        path.mkdir()
    elif content is not None:
        path.write_text(content)
    before = sorted(p.name for p in folder.rglob("*"))
    proc = tt("doctor", path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert str(path) in proc.stderr and says in proc.stderr, proc.stderr
    assert "python" not in proc.stdout  # refused before any check ran
    code, out = tt.json("doctor", path)
    assert code == 2 and out["ok"] is False and str(path) in out["error"]["message"] and says in out["error"]["message"], out
    assert sorted(p.name for p in folder.rglob("*")) == before


def test_init_writes_placeholders_that_doctor_flags(tt, tmp_path):
    code, out = tt.json("init", tmp_path / "new", "--engine", "echo")
    assert code == 0
    spec = json.loads((tmp_path / "new" / "tunedtensor.json").read_text())
    assert spec["engine"] == "echo"
    code, doctor = tt.json("doctor", tmp_path / "new" / "tunedtensor.json")
    assert code == 1
    flagged = [c["name"] for c in doctor["checks"] if c["status"] == "fail"]
    assert "spec system_prompt" in flagged and "spec examples.0.input" in flagged
    again = tt("init", tmp_path / "new", "--engine", "echo")
    assert again.returncode == 2 and "already exists" in again.stderr


def test_a_missing_spec_file_is_said_as_such_not_as_fields_to_fix(tt, tmp_path):
    missing = tmp_path / "nope.json"
    for command in (("validate", missing), ("run", missing, "--resume", tmp_path / "run")):
        proc = tt(*command)
        assert proc.returncode == 2 and f"{missing}: cannot read: no such file" in proc.stderr, proc.stderr
        assert "invalid spec" not in proc.stderr and "Fix the fields" not in proc.stderr, proc.stderr
    code, out = tt.json("validate", missing)
    assert code == 2 and out["error"]["message"].startswith(f"{missing}: cannot read: no such file"), out
    assert not (tmp_path / "run").exists()


def test_an_unknown_key_in_the_file_or_in_set_gets_the_closest_field(tt, tmp_path):
    spec = echo_spec()
    spec["systm_prompt"] = "x"
    path = write_spec(tmp_path / "a", spec)
    code, out = tt.json("validate", path, "--set", "echo.stepz=3")
    found = {e["loc"]: e["msg"] for e in out["errors"]}
    assert code == 2 and "did you mean 'system_prompt'?" in found["systm_prompt"], found
    assert "did you mean 'steps'?" in found["echo.stepz"] and "--set echo.stepz=3" in found["echo.stepz"], found
    spec = echo_spec()
    spec["zzzzzz"] = 1  # nothing close: the plain advice
    code, out = tt.json("validate", write_spec(tmp_path / "b", spec))
    assert code == 2 and out["errors"][0]["msg"].endswith("remove it or check the spelling"), out
