"""`tt validate --set KEY=VALUE`: the spec validated as `tt run --set` would read it (tt_host.spec.overrides, the
loader both share): the overridden value shows in the compiled message and the split, the arguments are listed, a
bad argument or a value validation refuses exits 2 naming the `--set` argument, and the spec file is never written.
"""

from __future__ import annotations

import json

from conftest import echo_spec, write_spec


def test_validate_applies_set_overrides_as_run_would(tt, tmp_path):
    spec = write_spec(tmp_path / "s", echo_spec(steps=2))
    written = spec.read_text()
    given = ["--set", "system_prompt=Answer with the capital city only.", "--set", "name=capitals-2",
             "--set", "echo.steps=3"]
    code, out = tt.json("validate", spec, *given)
    assert code == 0, out
    assert out["system_message"] == "Answer with the capital city only.", out
    assert out["split_salt"] == "capitals-2" and out["overrides"] == given[1::2], out
    code, plain = tt.json("validate", spec)
    assert code == 0 and plain["overrides"] == [] and plain["system_message"] == "Answer with the capital city."
    human = tt("validate", spec, *given)
    assert human.returncode == 0, human.stderr
    assert "Answer with the capital city only." in human.stdout
    assert "With --set system_prompt=Answer with the capital city only. --set name=capitals-2" in human.stdout
    assert spec.read_text() == written  # the file is never written


def test_validate_names_a_bad_set_argument_and_exits_2(tt, tmp_path):
    spec = write_spec(tmp_path / "s", echo_spec(steps=2))
    for argument, expected in {"echo.steps": "give KEY=VALUE", "echo.steps=0": "echo.steps",
                               "echo.no_such=1": "unknown field", "echo.st\x1beps=3": "is not a dotted spec field"}.items():
        code, out = tt.json("validate", spec, "--set", argument)
        message = out["error"]["message"] + json.dumps(out.get("errors"))
        assert code == 2 and out["valid"] is False, (argument, out)
        assert f"--set {argument.replace(chr(27), '')}" in message and expected in message, (argument, out)
        human = tt("validate", spec, "--set", argument)
        assert human.returncode == 2 and f"--set {argument.replace(chr(27), '')}" in human.stderr, human.stderr
        assert "\x1b" not in human.stderr + human.stdout
    assert not (tmp_path / "s" / ".tuned-tensor").exists()


def test_a_set_key_too_deep_or_too_long_exits_2_naming_it(tt, tmp_path):
    """Hundreds of dotted parts were a RecursionError (exit 1); a key plus its value may nest no deeper than a spec
    file (userinput.MAX_DEPTH), and a key is at most overrides.MAX_KEY characters."""
    from tt_host.spec.overrides import MAX_KEY
    from tt_stagekit.userinput import MAX_DEPTH

    spec = write_spec(tmp_path / "s", echo_spec(steps=2))
    cases = {"echo." + ".".join(["a"] * 400) + "=1": "levels deep",
             "echo." + ".".join(["a"] * (MAX_DEPTH - 3)) + "=" + "[" * 3 + "]" * 3: "levels deep",
             "echo.s" + "t" * MAX_KEY + "=1": f"over {MAX_KEY}"}
    for argument, words in cases.items():
        code, out = tt.json("validate", spec, "--set", argument)
        assert code == 2 and out["valid"] is False, (argument[:40], out)
        (error,) = out["errors"]
        assert error["loc"].startswith(f"--set {argument[:20]}") and words in error["msg"], error
    code, out = tt.json("validate", spec, "--set", "echo." + ".".join(["a"] * 10) + "=1")
    assert code == 2 and "unknown field" in json.dumps(out), out  # a shallow key passes the bound to validation
    assert not (tmp_path / "s" / ".tuned-tensor").exists()
