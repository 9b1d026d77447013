"""Blank is not content: a text field that must carry content is refused when it is blank
after trimming (spaces, tabs, newlines), naming the field; `tt validate` exits 2 and nothing is made.

The neutral fields through the echo engine, the engines' own through the shipped examples (adapter and
foundation); `tt validate --json` in-process (tests/badinput_support.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from badinput_support import error_locs, in_process_tt
from conftest import REPO, echo_spec, write_spec
from example_copy_support import tracked_copy

BLANKS = (" ", "\t\n  ", "\u3000")  # a space, tab and newlines, an ideographic space


@pytest.fixture(scope="module")
def tt_in(tmp_path_factory):
    with in_process_tt(tmp_path_factory.mktemp("tt-in")) as tt:
        yield tt


def _set(data: dict, dotted: str, value) -> dict:
    *parents, last = dotted.split(".")
    node = data
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
    node[int(last) if isinstance(node, list) else last] = value
    return data


def _refused(tt_in, spec: Path, loc: str) -> None:
    code, out = tt_in.json("validate", spec)
    assert code == 2 and out["valid"] is False, out
    assert loc in error_locs(out), (loc, out["errors"])
    assert any("blank" in e["msg"] for e in out["errors"] if e["loc"] == loc), out["errors"]


NEUTRAL = ["name", "examples.0.input", "examples.3.output", "evaluation.split_salt",
           "synthesis.teacher.model", "synthesis.teacher.model_id"]


@pytest.mark.parametrize("loc", NEUTRAL)
def test_a_blank_neutral_text_field_is_refused_naming_it(tt_in, tmp_path, loc):
    for number, blank in enumerate(BLANKS):
        data = _set(echo_spec(), loc, blank)
        _refused(tt_in, write_spec(tmp_path / f"s{number}", data), loc)


@pytest.mark.parametrize("engine, loc", [("adapter", "base_model"), ("adapter", "base_model_revision"),
                                          ("adapter", "examples.1.output"), ("foundation", "foundation.init_model"),
                                          ("foundation", "examples.0.input")])
def test_a_blank_engine_text_field_is_refused_naming_it(tt_in, tmp_path, engine, loc):
    folder = tmp_path / engine
    tracked_copy(f"examples/{engine}", folder)
    spec = folder / "tunedtensor.json"
    data = json.loads(spec.read_text())
    spec.write_text(json.dumps(_set(data, loc, " \t ")))
    _refused(tt_in, spec, loc)


@pytest.mark.parametrize("name", ["evil\x1b]0;owned\x07", "two\nlines", "bell\x07", "c1\x9b31m"])
def test_a_spec_name_with_a_control_character_is_refused_naming_it(tt_in, tmp_path, name):
    """The name is printed by `tt run`, `tt runs list`, `tt models list`: an escape sequence never reaches a
    terminal through it."""
    code, out = tt_in.json("validate", write_spec(tmp_path / "s", _set(echo_spec(), "name", name)))
    assert code == 2 and "name" in error_locs(out), out
    assert any("control character" in e["msg"] for e in out["errors"] if e["loc"] == "name"), out["errors"]
