"""Held-out bad inputs at the edges, each refused with exit 2 naming the culprit and creating nothing:
version references that are not ASCII digits (`ID@²` once crashed get/activate/history/export/serve with a
traceback, `ID@٣` read as version 3), pipeline step ids (a final newline slipped past `$`, 65 characters were
reported as a lowercase-letters problem), and a spec `name` carrying a right-to-left override. `tt models get
ID@1` takes a version as `activate` and `verify` do."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import echo_spec, write_spec


@pytest.fixture
def model(tt, tmp_path) -> str:
    code, out = tt.json("run", write_spec(tmp_path / "s", echo_spec()))
    assert code == 0, out
    return out["report"]["models"][0]["id"]


def home_files(tt) -> set[str]:
    home = Path(tt.env["TT_HOME"])
    return {str(p.relative_to(home)) for p in home.rglob("*") if "index" not in p.parts}


@pytest.mark.parametrize("version", ["\u00b2", "\u0663", "0", "01", "\uff13"])
def test_a_version_that_is_not_ascii_digits_is_refused_naming_the_reference(tt, tmp_path, model, version):
    reference = f"{model}@{version}"
    before = home_files(tt)
    commands = [("models", "get", reference), ("models", "activate", reference, "--force"),
                ("models", "history", reference), ("models", "verify", reference),
                ("models", "export", reference, tmp_path / "out"), ("serve", reference, "--port", "0")]
    for command in commands:
        proc = tt(*command, "--json", timeout=300)
        assert proc.returncode == 2, (command, proc.stdout, proc.stderr)
        assert "Traceback" not in proc.stderr, (command, proc.stderr)
        error = json.loads(proc.stdout)["error"]
        assert reference in json.dumps(error, ensure_ascii=False) and "ASCII digits" in json.dumps(error), (
            command, error)
    assert not (tmp_path / "out").exists() and home_files(tt) == before  # nothing created, nothing activated


def test_models_get_takes_a_version_as_activate_and_verify_do(tt, model):
    code, entry = tt.json("models", "get", f"{model}@1")
    assert code == 0 and entry["id"] == model and entry["version"] == 1, entry
    code, out = tt.json("models", "get", f"{model}@7")
    assert code == 2 and "has no version 7" in json.dumps(out), out


STEP_CASES = {
    "a final newline": ("train\n", "steps.0.id: step IDs must use lowercase letters"),
    "65 characters": ("t" * 65, "steps.0.id: is 65 characters long; step IDs are at most 64 characters"),
    "a reference ending in a newline": (None, "with.model: artifact references must use"),
}


@pytest.mark.parametrize("case", list(STEP_CASES), ids=list(STEP_CASES))
def test_bad_pipeline_step_ids_are_refused_naming_the_step_and_create_nothing(tt, tmp_path, case):
    step_id, message = STEP_CASES[case]
    folder = tmp_path / "p"
    write_spec(folder, echo_spec())
    steps = [{"id": step_id, "uses": "train"}] if step_id else [
        {"id": "train", "uses": "train"},
        {"id": "candidate", "uses": "evaluate", "with": {"model": {"from": "train.model\n"}, "evaluator": "exact"}}]
    path = folder / "tunedtensor.pipeline.json"
    path.write_text(json.dumps({"version": 1, "target": "local", "steps": steps}))
    for command in (("pipeline", "validate", path), ("pipeline", "run", "-f", path, "--spec", folder / "tunedtensor.json")):
        code, out = tt.json(*command)
        assert code == 2, (command, out)
        assert any(message in p for p in out.get("problems") or []) or message in json.dumps(out), (command, out)
    assert sorted(p.name for p in folder.iterdir()) == ["tunedtensor.json", "tunedtensor.pipeline.json"]


@pytest.mark.parametrize("trick", ["\u202e", "\u2066", "\x9b", "\x1b[2J"], ids=["RLO", "LRI", "C1 CSI", "ESC"])
def test_a_spec_name_with_a_bidi_or_control_character_is_refused(tt, tmp_path, trick):
    spec = echo_spec()
    spec["name"] = f"capitals{trick}gnp.exe"
    path = write_spec(tmp_path / "s", spec)
    for command in ("validate", "run"):
        code, out = tt.json(command, path)
        assert code == 2, out
        errors = {e["loc"]: e["msg"] for e in out["errors"]}
        assert "name" in errors and f"U+{ord(trick[0]):04X}" in errors["name"], out
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == ["tunedtensor.json"]
