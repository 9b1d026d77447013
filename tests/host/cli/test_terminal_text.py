"""Strings from a shipped run folder never reach the terminal raw (tt_host.terminal): escape sequences (ESC, the
one-byte C1 CSI U+009B), a carriage return and a right-to-left override planted in run.json and report.md are
removed from what `tt runs get|list|report|events` print, and written as `\\uXXXX` escapes under --json, which
parses back to the same strings."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import echo_spec, write_spec
from tt_host.terminal import UNSAFE, clean, json_text

HOSTILE = "\x1b]0;owned\x07\x1b[31mred\x1b[0m \x9b2J \u202egnp.exe\r\x7f"


def test_clean_keeps_text_tabs_and_newlines_and_json_text_round_trips():
    assert clean(f"a\t{HOSTILE}\nb") == "a\t]0;owned[31mred[0m 2J gnp.exe\nb"
    document = json.dumps({"k": HOSTILE}, ensure_ascii=False)
    assert not UNSAFE.search(json_text(document)) and json.loads(json_text(document)) == {"k": HOSTILE}


def test_a_shipped_run_jsons_strings_are_stripped_on_the_terminal_and_escaped_in_json(tt, tmp_path):
    code, out = tt.json("run", write_spec(tmp_path / "s", echo_spec()))
    assert code == 0, out
    run = Path(out["run_dir"])
    state = json.loads((run / "run.json").read_text())
    state["spec_name"] = f"capitals {HOSTILE}"
    state["stages"]["train"]["error"] = f"boom {HOSTILE}"
    (run / "run.json").write_text(json.dumps(state, ensure_ascii=False))
    (run / "report.md").write_text(f"# report {HOSTILE}\n", encoding="utf-8")
    for command in (("runs", "get", run), ("runs", "list"), ("runs", "report", run), ("runs", "events", run)):
        proc = tt(*command)
        shown = proc.stdout + proc.stderr
        assert not UNSAFE.search(shown), (command, shown)
    assert "capitals ]0;owned[31mred[0m 2J gnp.exe" in tt("runs", "get", run).stdout
    proc = tt("runs", "get", run, "--json")
    assert proc.returncode == 0 and not UNSAFE.search(proc.stdout), proc.stdout
    assert json.loads(proc.stdout)["spec"] == f"capitals {HOSTILE}"
