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


# The five code points on which the report's own rule (tt_host.runs.verdict._CONTROL, before issue 51) and the
# terminal's disagreed: ALM is a bidi control (removed everywhere now); the zero-width space, non-joiner and
# joiner act on nothing (kept everywhere now: the joiner makes emoji sequences); tab is layout, not a control.
DISPUTED = "\t\u061c\u200b\u200c\u200d"


def test_one_control_character_rule_for_the_terminal_and_the_report():
    from tt_host.reports.verdict import clean as cell

    for char in "\x00\x1b\r\x7f\x9b\u061c\u200e\u200f\u202a\u202e\u2066\u2069":  # acted on: gone from both
        assert clean(f"a{char}b") == "ab" and cell(f"a{char}b") == "ab", hex(ord(char))
    for char in "\u200b\u200c\u200d\u00ad\u2028":  # shown or ignored, never acted on: kept by both
        assert clean(f"a{char}b") == f"a{char}b" == cell(f"a{char}b"), hex(ord(char))
    assert clean(f"a{DISPUTED}\nb") == "a\t\u200b\u200c\u200d\nb"  # the terminal keeps its layout
    assert cell(f"a{DISPUTED}\nb") == "a\u200b\u200c\u200d ⏎ b"  # a cell is one line: tab dropped, ⏎ for new line


def test_a_spec_name_refuses_what_the_terminal_removes_and_tab_and_newline_nothing_else():
    from tt_host.spec.strict import no_control

    refused = set()
    for code in range(0x3000):
        try:
            no_control(f"a{chr(code)}b")
        except ValueError:
            refused.add(chr(code))
    assert refused == {chr(c) for c in range(0x3000) if UNSAFE.match(chr(c))} | {"\t", "\n"}


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
