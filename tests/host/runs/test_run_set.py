"""`tt run --set KEY=VALUE` (tt_host.spec.overrides): spec fields overridden before validation, held by the frozen
spec.json, listed in run.json and fingerprinted like the spec (a resume with other values is a spec change: the
echo engine's stages are not replaceable, so it is refused); the same on `--dry-run` and `tt pipeline plan|run`.
A bad argument exits 2 naming it and creates nothing. Host only: the echo test engine.
"""

from __future__ import annotations

import json

from conftest import echo_spec, write_spec


def test_set_values_are_validated_frozen_recorded_and_fingerprinted(tt, tmp_path):
    spec = write_spec(tmp_path, echo_spec(steps=2))
    run = tmp_path / "run"
    given = ["--set", "echo.steps=3", "--set", "echo.learning_rate=0.5", "--set", "examples.0.output=Town 0",
             "--set", "system_prompt=Answer with the capital city only."]
    code, out = tt.json("run", spec, "--resume", run, *given)
    assert code == 0, out
    frozen = json.loads((run / "spec.json").read_text())
    assert frozen["echo"]["steps"] == 3 and frozen["echo"]["learning_rate"] == 0.5, frozen["echo"]
    assert frozen["examples"][0]["output"] == "Town 0" and frozen["system_prompt"].endswith("only."), frozen
    assert json.loads((run / "run.json").read_text())["overrides"] == given[1::2]
    assert json.loads(spec.read_text())["echo"] == {"steps": 2}  # the file is never written

    code, plan = tt.json("run", spec, "--resume", run, "--dry-run", *given)
    assert code == 0 and {s["action"] for s in plan["stages"]} <= {"reuse", "skip", "leave"}, plan
    code, plan = tt.json("pipeline", "plan", "--spec", spec, "--resume", run, *given)
    assert code == 0 and {s["action"] for s in plan["stages"]} <= {"reuse", "skip", "leave"}, plan
    other = [*given[:1], "echo.steps=4", *given[2:]]
    for command in (("run", spec, "--resume", run, "--dry-run", *other), ("pipeline", "plan", "--spec", spec,
                                                                          "--resume", run, *other)):
        code, plan = tt.json(*command)
        assert code == 2 and "refuse" in {s["action"] for s in plan["stages"]}, plan
    code, out = tt.json("run", spec, "--resume", run, *other)
    assert code == 2, out
    code, out = tt.json("run", spec, "--resume", run)  # no --set: the spec as written, a change too
    assert code == 2, out
    assert json.loads((run / "spec.json").read_text()) == frozen
    code, out = tt.json("pipeline", "run", "--spec", spec, "--resume", run, *given)
    assert code == 0 and out["status"] == "completed", out
    assert json.loads((run / "run.json").read_text())["overrides"] == given[1::2]


def test_a_bad_set_argument_exits_2_naming_it_and_creates_nothing(tt, tmp_path):
    spec = write_spec(tmp_path, echo_spec(steps=2))
    bad = {
        "echo.steps": "give KEY=VALUE",
        "=3": "give KEY=VALUE",
        "echo..steps=3": "is not a dotted spec field",
        "echo.st\x1beps=3": "is not a dotted spec field",
        "echo.steps.every=3": "`echo.steps` is int, not an object",
        "examples.99.output=x": "`examples` has 10 item(s); index 99 is out of range",
        "examples.first.output=x": "`examples` is a list: give an index",
        "echo.steps=three": "echo.steps",
        "echo.steps=0": "echo.steps",
        "echo.no_such=1": "unknown field",
    }
    for argument, expected in bad.items():
        for command in (("run", spec, "--resume", tmp_path / "run"), ("run", spec, "--dry-run"),
                        ("pipeline", "plan", "--spec", spec)):
            code, out = tt.json(*command, "--set", "echo.steps=3", "--set", argument)
            message = out["error"]["message"] + json.dumps(out.get("errors"))
            shown = argument.replace("\x1b", "")
            assert code == 2 and f"--set {shown}" in message and expected in message, (argument, out)
            assert "\x1b" not in message, message  # echoed without its control characters
    assert not (tmp_path / "run").exists() and not (tmp_path / ".tuned-tensor").exists()
