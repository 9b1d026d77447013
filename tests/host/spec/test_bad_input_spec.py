"""Bad specs and run folders: exit 2, the field or file named, `--json` is JSON, nothing made.

Each case runs `tt validate --json` (and, where it matters, `tt run --json`)
in-process; the cases where a hang is the danger (a FIFO) go through the
real console script with a timeout.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from badinput_support import error_locs, in_process_tt, snapshot
from conftest import echo_spec, write_spec


@pytest.fixture(scope="module")
def tt_in(tmp_path_factory):
    with in_process_tt(tmp_path_factory.mktemp("tt-in")) as tt:
        yield tt


def _refused(tt_in, spec_path: Path, root: Path, loc: str, text: str = "") -> dict:
    """validate and run --json both exit 2 naming `loc` (and `text` in its message); nothing created."""
    before = snapshot(root)
    code, out = tt_in.json("validate", spec_path)
    assert code == 2 and out["valid"] is False, out
    assert loc in error_locs(out), out
    if text:
        assert any(text in e["msg"] for e in out["errors"]), out
    code, out = tt_in.json("run", spec_path, "--resume", root / "run")
    assert code == 2, out
    human = tt_in("validate", spec_path)
    assert human.code == 2 and loc in human.stderr, human.stderr
    assert snapshot(root) == before
    return out


def _raw_spec(folder: Path, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "tunedtensor.json"
    path.write_text(text)
    return path


def test_integer_thousands_of_digits_long_names_the_field(tt_in, tmp_path):
    text = json.dumps(echo_spec(steps=1)).replace('"steps": 1', '"steps": ' + "9" * 5000)
    _refused(tt_in, _raw_spec(tmp_path / "s", text), tmp_path, "echo.steps", "5000 digits")


def test_nesting_thousands_deep_is_refused(tt_in, tmp_path):
    spec = echo_spec()
    text = json.dumps(spec).replace('"system_prompt"', '"description": ' + "[" * 5000 + "]" * 5000 + ', "system_prompt"')
    _refused(tt_in, _raw_spec(tmp_path / "s", text), tmp_path, "(file)", "nested deeper")
    text = json.dumps(spec).replace('"system_prompt"', '"description": ' + "[" * 200 + "]" * 200 + ', "system_prompt"')
    _refused(tt_in, _raw_spec(tmp_path / "t", text), tmp_path, "description", "nested deeper")


@pytest.mark.parametrize("key,loc", [("name", "name"), ("steps", "echo.steps")])
def test_duplicate_keys_are_refused_naming_the_key(tt_in, tmp_path, key, loc):
    text = json.dumps(echo_spec(steps=2))
    text = text.replace('"name": "capitals"', '"name": "capitals", "name": "other"') if key == "name" else \
        text.replace('"steps": 2', '"steps": 2, "steps": 3')
    _refused(tt_in, _raw_spec(tmp_path / "s", text), tmp_path, loc, "duplicate key")


@pytest.mark.parametrize("value", ['"4"', "4.0", "true"])
def test_integer_fields_refuse_strings_floats_and_booleans(tt_in, tmp_path, value):
    text = json.dumps(echo_spec(steps=1)).replace('"steps": 1', f'"steps": {value}')
    _refused(tt_in, _raw_spec(tmp_path / "s", text), tmp_path, "echo.steps")


@pytest.mark.parametrize("value", ["Infinity", "-Infinity", "NaN", "1e999"])
def test_numbers_must_be_finite(tt_in, tmp_path, value):
    text = json.dumps(echo_spec(learning_rate=0.5)).replace('"learning_rate": 0.5', f'"learning_rate": {value}')
    _refused(tt_in, _raw_spec(tmp_path / "s", text), tmp_path, "echo.learning_rate")


def test_spec_name_too_long_for_the_filesystem(tt_in, tmp_path):
    path = tmp_path / ("s" * 300 + ".json")
    code, out = tt_in.json("validate", path)
    assert code == 2 and "too long" in out["errors"][0]["msg"], out
    assert not any(tmp_path.iterdir())


def test_dataset_path_too_long_names_the_field(tt_in, tmp_path):
    spec = echo_spec()
    spec["evaluation"] = {"general_regression": {"dataset": "d" * 300 + ".jsonl"}}
    _refused(tt_in, write_spec(tmp_path / "s", spec), tmp_path, "evaluation.general_regression.dataset", "too long")


def test_spec_that_is_a_folder_or_device(tt_in, tmp_path):
    (tmp_path / "dir.json").mkdir()
    for path, kind in ((tmp_path / "dir.json", "a folder"), (Path("/dev/null"), "character device")):
        code, out = tt_in.json("validate", path)
        assert code == 2 and kind in out["errors"][0]["msg"], out


def test_spec_that_is_a_fifo_is_refused_without_hanging(tt, tmp_path):
    fifo = tmp_path / "spec.json"
    os.mkfifo(fifo)
    before = snapshot(tmp_path)
    code, out = tt.json("validate", fifo, timeout=60)
    assert code == 2 and "named pipe" in out["errors"][0]["msg"], out
    proc = tt("run", fifo, timeout=60)
    assert proc.returncode == 2 and "named pipe" in proc.stderr and "Traceback" not in proc.stderr
    assert snapshot(tmp_path) == before


def test_resume_naming_a_file_or_a_dangling_link(tt_in, tmp_path):
    spec = write_spec(tmp_path / "s", echo_spec())
    afile = tmp_path / "notes.txt"
    afile.write_text("mine\n")
    link = tmp_path / "run-link"
    link.symlink_to(tmp_path / "nowhere")
    for target, text in ((afile, "not a run directory"), (link, "does not exist"),
                         (afile / "run", "is a file"), (tmp_path / ("r" * 300), "too long")):
        before = snapshot(tmp_path)
        for extra in ((), ("--dry-run",)):
            code, out = tt_in.json("run", spec, "--resume", target, *extra)
            assert code == 2 and text in out["error"]["message"], (target, out)
            human = tt_in("run", spec, "--resume", target, *extra)
            assert human.code == 2 and text in human.stderr
        assert snapshot(tmp_path) == before
        assert afile.read_text() == "mine\n" and not (tmp_path / "nowhere").exists()


@pytest.mark.parametrize("args", [
    ("init", "{long}"), ("init", "{file}"), ("runs", "list", "{long}"), ("runs", "report", "{long}"),
    ("runs", "get", "{long}"), ("runs", "events", "{long}"), ("runs", "compare", "{long}", "{long}"),
    ("models", "export", "{long}", "{out}"), ("serve", "{long}"),
])
def test_commands_refuse_names_too_long_or_files_for_folders(tt_in, tmp_path, args):
    afile = tmp_path / "file.txt"
    afile.write_text("x")
    names = {"long": str(tmp_path / ("L" * 300)), "file": str(afile), "out": str(tmp_path / "out")}
    args = [a.format(**names) for a in args]
    before = snapshot(tmp_path)
    code, out = tt_in.json(*args)
    assert code == 2 and out["ok"] is False and ("too long" in out["error"]["message"] or "is a file" in out["error"]["message"]), out
    human = tt_in(*args)
    assert human.code == 2 and "error:" in human.stderr
    assert snapshot(tmp_path) == before and afile.read_text() == "x"


@pytest.mark.parametrize("key", ["echo." + ".".join(["steps"] * 500), "hyperparameters." + "x" * 2000,
                                 "examples.0." + ".".join(["0"] * 300)])
def test_a_set_key_deeper_or_longer_than_a_spec_may_nest_is_refused_naming_it(tt_in, tmp_path, key):
    """Hundreds of dotted parts were a RecursionError (exit 1, a traceback); validate, run and run --dry-run exit 2
    naming the `--set` argument, and create nothing."""
    spec = write_spec(tmp_path / "s", echo_spec())
    before = snapshot(tmp_path)
    for command in (("validate",), ("run",), ("run", "--dry-run")):
        code, out = tt_in.json(*command, spec, "--set", f"{key}=1")
        assert code == 2, (command, out)
        assert f"--set {key[:20]}" in json.dumps(out), (command, out)
    assert snapshot(tmp_path) == before
