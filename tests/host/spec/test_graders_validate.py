"""`tt validate` and `tt run` check the spec's graders on its own outputs (docs/evaluation.md "The validate
check"): a grader that fails a reference is refused, exit 2, naming grader and example, nothing created; a
bad entry names its field; `--json` lists the graders with their pass rate on the references."""

import json

from conftest import echo_spec, write_spec
from tt_host.spec import graders as spec_graders
from tt_host.spec.schema import BehaviorSpec


def test_a_grader_that_fails_a_reference_is_refused_by_validate_and_run_naming_grader_and_example(tt, tmp_path):
    spec = echo_spec(steps=1)
    spec["examples"][4]["output"] = "Town"  # no number: the declared number grader contradicts this example
    spec["evaluation"] = {"graders": [{"kind": "exact"}, {"kind": "number", "name": "city_number"}]}
    path = write_spec(tmp_path / "s", spec)
    proc = tt("validate", path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "evaluation.graders.1" in proc.stderr and "grader 'city_number' (number)" in proc.stderr
    assert "examples.4 ('Capital of country 4?')" in proc.stderr and "(9/10 pass)" in proc.stderr
    code, out = tt.json("validate", path)
    assert code == 2 and out["errors"][0]["loc"] == "evaluation.graders.1"
    assert [(g["name"], g["reference_passed"], g["reference_count"], g["reference_pass_rate"])
            for g in out["graders"]] == [("exact", 10, 10, 1.0), ("city_number", 9, 10, 0.9)]
    run = tt("run", path)
    assert run.returncode == 2 and "city_number" in run.stderr
    assert not (tmp_path / "s" / ".tuned-tensor").exists()


def test_a_regex_grader_failing_a_reference_is_refused_through_its_child_process_check(tt, tmp_path):
    """A spec with a `regex` grader is checked in a child process: what the child finds is refused exactly as the
    in-process check's (exit 2 at the grader's entry naming it and the example, nothing created), and its pass
    rates are the ones `--json` lists."""
    spec = echo_spec(steps=1)
    spec["examples"][6]["output"] = "Town of six"  # no "City N": the declared pattern contradicts this example
    spec["evaluation"] = {"graders": [{"kind": "exact"}, {"kind": "regex", "name": "city", "pattern": r"City \d+"}]}
    path = write_spec(tmp_path / "s", spec)
    code, out = tt.json("validate", path)
    assert code == 2 and [e["loc"] for e in out["errors"]] == ["evaluation.graders.1"], out
    message = out["errors"][0]["msg"]
    assert "grader 'city' (regex)" in message and "examples.6 ('Capital of country 6?')" in message, message
    assert "(9/10 pass)" in message, message
    assert [(g["name"], g["reference_passed"]) for g in out["graders"]] == [("exact", 10), ("city", 9)], out
    run = tt("run", path)
    assert run.returncode == 2 and "grader 'city' (regex)" in run.stderr, run.stderr
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == ["tunedtensor.json"]


def test_bad_grader_entries_exit_2_naming_the_field(tt, tmp_path):
    for entry, loc in (({"kind": "regex", "pattern": "(a+)+$"}, "evaluation.graders.0.pattern"),
                       ({"kind": "max_chars", "max": "10"}, "evaluation.graders.0.max"),
                       ({"kind": "json_schema", "schema": {"type": "object", "minProperties": 1}},
                        "evaluation.graders.0.schema.minProperties"),
                       ({"kind": "bleu"}, "evaluation.graders.0.kind")):
        spec = echo_spec(steps=1)
        spec["evaluation"] = {"graders": [entry]}
        code, out = tt.json("validate", write_spec(tmp_path / "s", spec))
        assert code == 2 and out["errors"][0]["loc"] == loc, out
        assert "Value error" not in out["errors"][0]["msg"]
    spec = echo_spec(steps=1)
    spec["evaluation"] = {"graders": [7]}
    code, out = tt.json("validate", write_spec(tmp_path / "s", spec))
    assert code == 2 and out["errors"][0]["loc"] == "evaluation.graders.0", out


def test_validate_lists_the_graders_and_their_pass_rate_on_the_references(tt, tmp_path):
    spec = echo_spec(steps=1)
    spec["evaluation"] = {"graders": [{"kind": "number"}, {"kind": "regex", "pattern": r"City \d+"}]}
    path = write_spec(tmp_path / "s", spec)
    code, out = tt.json("validate", path)
    assert code == 0, out
    assert out["graders_derived_by"] is None
    assert [(g["name"], g["kind"], g["reference_passed"], g["reference_count"], g["reference_pass_rate"])
            for g in out["graders"]] == [("number", "number", 10, 10, 1.0), ("regex", "regex", 10, 10, 1.0)]
    assert out["graders"][1]["pattern"] == r"City \d+"
    human = tt("validate", path, check=True).stdout
    assert "Graders (declared), each passing the examples' own outputs:" in human
    assert '- regex (regex: pattern "City \\\\d+", max_chars 20000): 10/10 references pass' in human
    # the dry run shows the same graders, and creates nothing
    code, plan = tt.json("run", path, "--dry-run")
    assert code == 0 and plan["graders"] == out["graders"], plan
    dry = tt("run", path, "--dry-run", check=True).stdout
    assert "Graders (declared)" in dry and "- number (number" in dry
    assert not (tmp_path / "s" / ".tuned-tensor").exists()
    del spec["evaluation"]
    code, out = tt.json("validate", write_spec(tmp_path / "s", spec))
    assert out["graders_derived_by"] == "text" and [g["name"] for g in out["graders"]] == ["exact", "token_f1"]


def test_a_regex_grader_too_slow_on_the_outputs_cannot_hang_validate(monkeypatch):
    """A pattern the nesting rule lets through (`.*` after `.*`) but that takes polynomial time on a long output:
    the check runs in a child process and is refused when it outlasts its limit."""
    monkeypatch.setattr(spec_graders, "CHECK_SECONDS", 1.0)
    spec = echo_spec(steps=1)
    spec["examples"][0]["output"] = "p" * 4000
    spec["evaluation"] = {"graders": [{"kind": "regex", "pattern": ".*.*.*.*.*.*.*.*x"}]}
    spec.pop("engine"), spec.pop("echo")
    checked = spec_graders.check(BehaviorSpec.model_validate(json.loads(json.dumps(spec))))
    assert [e.loc for e in checked.errors] == ["evaluation.graders"]
    assert "took over 1 s" in checked.errors[0].msg
