"""A misbehaving plugin is contained like one that raises: it yields something other than an Engine, exits,
raises KeyboardInterrupt/SystemExit at import or in an observer, prints at import, or names an engine unsafely.
Every command keeps working, `--json` stays JSON, and the culprit is listed with its reason."""

from __future__ import annotations

import json
import os

from conftest import echo_spec, write_spec
from plugin_site import add_distribution

NOT_AN_ENGINE = '''
from tt_host.hookspecs import hookimpl

@hookimpl
def tt_engines():
    yield "not an engine"
    yield {"name": "dict-engine"}
'''
EXITS = "import sys\nsys.exit(3)\n"
INTERRUPTS = "raise KeyboardInterrupt\n"
SYSTEM_EXIT = "raise SystemExit('bye')\n"
PRINTS = "print('hello from a chatty plugin')\nprint('{\"not\": \"tt output\"}')\n"
UNSAFE_NAME = '''
import dataclasses
import tt_engine_echo.plugin as echo
from tt_host.hookspecs import hookimpl

@hookimpl
def tt_engines():
    engine = next(echo.tt_engines())
    yield dataclasses.replace(engine, name="../evil")
    yield dataclasses.replace(engine, name="Spaced Name")
    yield dataclasses.replace(engine, name="escaping",
                              stages=(dataclasses.replace(engine.stages[0], name="../outside"),) + engine.stages[1:])
'''
OBSERVER_EXITS = '''
import sys
from tt_host.hookspecs import hookimpl

@hookimpl
def tt_stage_event(run_dir, stage, event):
    if event.get("type") == "progress":
        sys.exit(5)
    raise KeyboardInterrupt
'''

BAD = {"notengine": NOT_AN_ENGINE, "exits": EXITS, "interrupts": INTERRUPTS, "systemexit": SYSTEM_EXIT,
       "unsafe": UNSAFE_NAME}


def _install(tt, tmp_path, plugins: dict[str, str]):
    site = tmp_path / "site-bad"
    for name, source in plugins.items():
        add_distribution(site, f"tt-{name}", "1.0", {name: f"tt_{name}_plugin"}, {f"tt_{name}_plugin": source})
    tt.env["PYTHONPATH"] = os.pathsep.join([str(site), tt.env["PYTHONPATH"]])
    return tt


def test_misbehaving_plugins_are_listed_and_tt_keeps_working(tt, tmp_path):
    tt = _install(tt, tmp_path, {**BAD, "chatty": PRINTS})
    code, listing = tt.json("engines", "list")  # a print at import would make this not JSON
    assert code == 0
    assert "echo" in [e["name"] for e in listing["engines"]]
    problems = {}
    for problem in listing["problems"]:
        problems.setdefault(problem["plugin"], []).append(problem["error"])
    assert set(BAD) <= set(problems) and "chatty" not in problems, problems
    assert any("yielded str, not tt_host.engine.Engine" in e for e in problems["notengine"])
    assert any("yielded dict" in e for e in problems["notengine"])
    assert "SystemExit(3)" in problems["exits"][0]
    assert "KeyboardInterrupt" in problems["interrupts"][0]
    assert "SystemExit('bye')" in problems["systemexit"][0]
    assert len(problems["unsafe"]) == 3 and sum("engine name is" in e for e in problems["unsafe"]) == 2
    assert any("stage named '../outside'" in e for e in problems["unsafe"])
    assert "../evil" not in json.dumps(listing["engines"])

    spec = write_spec(tmp_path / "s", echo_spec(steps=1))
    code, out = tt.json("validate", spec)
    assert code == 0, out
    proc = tt("validate", spec, "--json")
    assert "hello from a chatty plugin" in proc.stderr  # the plugin's print went to stderr, not into the JSON
    code, run = tt.json("run", spec)
    assert code == 0 and run["status"] == "completed", run


def test_strict_mode_reports_an_exiting_plugin_as_a_load_error(tt, tmp_path):
    tt = _install(tt, tmp_path, {"exits": EXITS})
    tt.env["TT_PLUGINS_STRICT"] = "1"
    proc = tt("engines", "list")
    assert proc.returncode == 1 and "SystemExit(3)" in proc.stderr


def test_an_observer_that_exits_or_interrupts_never_stops_the_run(tt, tmp_path):
    tt = _install(tt, tmp_path, {"quitter": OBSERVER_EXITS})
    tt.env["COLUMNS"] = "300"
    proc = tt("run", write_spec(tmp_path / "spec", echo_spec(steps=2)), timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # reported once (its first failure, KeyboardInterrupt on stage_start), though it fails on every event
    assert proc.stderr.count("observer 'quitter' failed") == 1, proc.stderr
    assert "plugin 'quitter' raised KeyboardInterrupt" in proc.stderr
