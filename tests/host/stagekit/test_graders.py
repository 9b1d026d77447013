"""tt_stagekit.graders: the graders compiled from a spec (docs/evaluation.md, Graders): derivation on the shipped
example specs, every kind, bad entries naming their field, hostile answers, the reference check."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from tt_stagekit.graders import KINDS, GraderError, GraderSet, from_spec
from tt_stagekit.graders.kinds import last_number

ROOT = Path(__file__).resolve().parents[3]


def shipped(name: str) -> dict:
    return json.loads((ROOT / "examples" / name / "tunedtensor.json").read_text())


def spec_with(outputs: list[str], graders=None) -> dict:
    spec = {"name": "t", "examples": [{"input": f"q{i}", "output": o} for i, o in enumerate(outputs)]}
    if graders is not None:
        spec["evaluation"] = {"graders": graders}
    return spec


def test_the_shipped_sentiment_spec_derives_a_label_grader_that_scores_the_label_only():
    spec = shipped("adapter")
    graders = from_spec(spec)
    assert graders.derived_by == "label" and [g.kind for g in graders.graders] == ["label"]
    assert sorted(graders.graders[0].describe()["labels"]) == ["negative", "positive"]
    assert graders.reward("Positive.", "positive") == 1.0 and graders.passes(" POSITIVE ", "positive")
    assert graders.reward("negative", "positive") == 0.0
    assert graders.reward("positive, I think", "positive") == 0.0
    assert all(check.failed == () for check in graders.check_references([e["output"] for e in spec["examples"]]))


def test_the_shipped_support_spec_derives_its_five_labels_and_the_arithmetic_spec_exact_and_f1():
    labels = from_spec(shipped("adapter-real")).graders[0].describe()["labels"]
    assert sorted(labels) == ["account", "billing", "returns", "shipping", "technical"]
    arithmetic = from_spec(shipped("foundation"))
    assert arithmetic.derived_by == "text" and [g.kind for g in arithmetic.graders] == ["exact", "token_f1"]
    # "8 plus 1 is 9." against "8 plus 1 is 10.": exact 0, F1 4/5 -> reward 0.4, passes F1 but not exact
    assert arithmetic.scores("8 plus 1 is 10.", "8 plus 1 is 9.") == {"exact": 0.0, "token_f1": pytest.approx(0.8)}
    assert arithmetic.reward("8 plus 1 is 10.", "8 plus 1 is 9.") == pytest.approx(0.4)
    assert not arithmetic.passes("8 plus 1 is 10.", "8 plus 1 is 9.")


def test_a_declared_number_grader_reads_the_last_number_of_the_shipped_arithmetic_answers():
    spec = shipped("foundation")
    spec["evaluation"] = {"graders": [{"kind": "number"}]}
    graders = from_spec(spec)
    assert graders.derived_by is None
    outputs = [e["output"] for e in spec["examples"]]
    assert graders.check_references(outputs)[0].pass_rate == 1.0
    assert graders.passes("The sum is 9", "8 plus 1 is 9.") and not graders.passes("9 plus 1", "8 plus 1 is 9.")


def test_the_derivation_rules_in_order():
    assert from_spec(spec_with(["a", "b", "a"])).derived_by == "text"  # b used once: not a label set
    assert from_spec(spec_with(["yes", "no", "yes", "no"])).derived_by == "label"
    many = [f"l{i}" for i in range(11)] * 2  # 11 distinct: too many for labels
    assert from_spec(spec_with(many)).derived_by == "text"
    assert from_spec(spec_with(["12", "-3.5", "1,204"])).derived_by == "number"
    assert from_spec(spec_with(['{"a": 1}', "[1, 2]"])).derived_by == "json"
    assert from_spec(spec_with(['{"a": 1}', "plain"])).derived_by == "text"
    assert from_spec({"name": "t"}).derived_by == "text"
    assert from_spec(spec_with(["1", "1", "2", "2"])).derived_by == "label"  # a small set wins over number


def test_a_label_set_holds_two_to_ten_labels_each_used_twice():
    """The bounds of the label rule, each at its edge: 10 distinct labels (the most) and 2 (the fewest) derive
    a label grader with every label; 11, or a label used once, do not."""
    ten = [f"class {chr(97 + i)}" for i in range(10)]
    graders = from_spec(spec_with(ten * 2))
    assert graders.derived_by == "label" and graders.graders[0].describe()["labels"] == ten
    assert from_spec(spec_with([*ten, "class k"] * 2)).derived_by == "text"
    assert from_spec(spec_with(["yes", "no"] * 2)).derived_by == "label"
    assert from_spec(spec_with(ten * 2 + ["class k"])).derived_by == "text"  # one label used once


def test_number_grader_last_number_sign_commas_and_tolerance():
    assert last_number("5-3") == 3 and last_number("x = -3") == -3 and last_number("1,204.5 apples") == 1204.5
    assert last_number("no digits") is None and last_number("9" * 400) is None  # inf is no number
    exact = from_spec(spec_with(["1"], [{"kind": "number"}]))
    loose = from_spec(spec_with(["1"], [{"kind": "number", "tolerance": 0.5}]))
    relative = from_spec(spec_with(["1"], [{"kind": "number", "relative": 0.01}]))
    assert exact.passes("1.0000001", "1") and not exact.passes("1.1", "1")
    assert loose.passes("1.4", "1") and not loose.passes("1.6", "1")
    assert relative.passes("1005", "1000") and not relative.passes("1011", "1000")
    assert exact.reward("none", "1") == 0.0


def test_json_derived_graders_score_shape_and_values_apart():
    graders = from_spec(spec_with(['{"name": "Ada", "age": 36}', '{"name": "Bo", "age": 4}']))
    ref = '{"name": "Ada", "age": 36}'
    assert graders.scores('{"name": "Ada", "age": 36}', ref) == {"json_shape": 1.0, "json_values": 1.0}
    assert graders.scores('{"name": "Bob", "age": 36.5}', ref) == {"json_shape": 1.0, "json_values": 0.0}
    assert graders.scores('{"name": "Ada"}', ref) == {"json_shape": 0.5, "json_values": 0.5}
    assert graders.scores('{"name": "Ada", "age": "36"}', ref)["json_shape"] == 0.5
    assert graders.scores('{"name": "Ada", "age": 36, "x": 1}', ref)["json_shape"] == pytest.approx(2 / 3)
    assert graders.reward("not json", ref) == 0.0


def test_json_schema_subset_and_unimplemented_keywords_named():
    schema = {"type": "object", "required": ["label"], "properties": {
        "label": {"enum": ["spam", "ham"]}, "score": {"type": "number"}, "tags": {"type": "array",
                                                                                   "items": {"type": "string"}}}}
    graders = from_spec(spec_with(['{"label": "spam"}'], [{"kind": "json_schema", "schema": schema}]))
    assert graders.passes('{"label": "ham", "score": 1, "tags": ["a"]}', "")
    assert not graders.passes('{"label": "eggs"}', "")
    assert not graders.passes('{"score": 1}', "")
    assert not graders.passes('{"label": "ham", "score": true}', "")
    assert not graders.passes('{"label": "ham", "tags": [1]}', "")
    bad = {"type": "object", "properties": {"age": {"type": "integer", "minimum": 0}}}
    with pytest.raises(GraderError) as caught:
        from_spec(spec_with(["x"], [{"kind": "json_schema", "schema": bad}]))
    assert caught.value.field == "evaluation.graders.0.schema.properties.age.minimum"
    assert "'minimum' is not implemented" in str(caught.value)


def test_regex_grader_refuses_catastrophic_patterns_with_the_hosts_rule_and_matches_the_whole_answer():
    from tt_host.spec import regexcheck
    from tt_stagekit.graders import regexsafe

    assert regexcheck.pathological is regexsafe.pathological  # one rule for synthesis.checks and graders
    with pytest.raises(GraderError) as caught:
        from_spec(spec_with(["a"], [{"kind": "regex", "pattern": "(a+)+$"}]))
    assert caught.value.field == "evaluation.graders.0.pattern" and "backtrack" in caught.value.message
    graders = from_spec(spec_with(["a"], [{"kind": "regex", "pattern": r"(?:yes|no)\b.*"}]))
    assert graders.passes("  yes, because\nof this  ", "") and not graders.passes("maybe yes", "")
    possessive = from_spec(spec_with(["a"], [{"kind": "regex", "pattern": "(?:a+b)++c"}]))
    started = time.monotonic()
    assert not possessive.passes("ab" * 5000 + "a" * 5000, "")
    assert time.monotonic() - started < 2


def test_constraint_forms_max_chars_valid_json_json_fields_and_labels():
    graders = from_spec(spec_with(["x"], [{"kind": "max_chars", "max": 5}, {"kind": "valid_json"},
                                          {"kind": "json_fields", "fields": ["a"]},
                                          {"kind": "label", "name": "verdict", "labels": ["ok", "bad"]}]))
    assert [g.name for g in graders.graders] == ["max_chars", "valid_json", "json_fields", "verdict"]
    assert graders.scores('{"a":1}', "ok") == {"max_chars": 0.0, "valid_json": 1.0, "json_fields": 1.0,
                                                "verdict": 0.0}
    assert graders.scores("Ok.", "ok")["verdict"] == 1.0 and graders.scores("fine", "fine")["verdict"] == 0.0
    assert graders.reward("Ok.", "ok") == pytest.approx(0.5)


@pytest.mark.parametrize("entry, field, words", [
    ({"kind": "exactly"}, "evaluation.graders.0.kind", "must be one of exact"),
    ({"kind": "regex", "patern": "x"}, "evaluation.graders.0.patern", "not a setting of kind 'regex'"),
    ({"kind": "regex"}, "evaluation.graders.0.pattern", "is required"),
    ({"kind": "regex", "pattern": "("}, "evaluation.graders.0.pattern", "not a valid regular expression"),
    ({"kind": "max_chars", "max": True}, "evaluation.graders.0.max", "must be an integer"),
    ({"kind": "max_chars", "max": 0}, "evaluation.graders.0.max", "1 to 1000000"),
    ({"kind": "number", "tolerance": -1}, "evaluation.graders.0.tolerance", "0 or more"),
    ({"kind": "number", "tolerance": float("nan")}, "evaluation.graders.0.tolerance", "finite"),
    ({"kind": "token_f1", "pass_at": 0}, "evaluation.graders.0.pass_at", "above 0"),
    ({"kind": "label", "labels": ["a", "A."]}, "evaluation.graders.0.labels", "listed twice"),
    ({"kind": "json_fields", "fields": []}, "evaluation.graders.0.fields", "non-empty list"),
    ({"kind": "exact", "name": "Bad Name"}, "evaluation.graders.0.name", "lowercase letter"),
    ("exact", "evaluation.graders.0", "must be an object"),
])
def test_a_bad_entry_names_its_field(entry, field, words):
    with pytest.raises(GraderError) as caught:
        from_spec(spec_with(["x"], [entry]))
    assert caught.value.field == field and words in str(caught.value)


def test_names_are_unique_and_the_list_is_not_empty():
    graders = from_spec(spec_with(["x"], [{"kind": "exact"}, {"kind": "exact"}, {"kind": "exact"}]))
    assert [g.name for g in graders.graders] == ["exact", "exact_2", "exact_3"]
    with pytest.raises(GraderError, match=r"evaluation.graders.1.name: 'a' names two graders"):
        from_spec(spec_with(["x"], [{"kind": "exact", "name": "a"}, {"kind": "token_f1", "name": "a"}]))
    with pytest.raises(GraderError, match="must list 1 to 32 graders"):
        from_spec(spec_with(["x"], []))


def test_the_reference_check_names_each_example_a_grader_fails():
    outputs = ["short", "a much longer answer", "tiny", "yet another long answer"]
    graders = from_spec(spec_with(outputs, [{"kind": "exact"}, {"kind": "max_chars", "max": 10}]))
    checks = graders.check_references(outputs)
    assert (checks[0].failed, checks[0].pass_rate) == ((), 1.0)
    assert (checks[1].name, checks[1].failed, checks[1].pass_rate) == ("max_chars", (1, 3), 0.5)


def test_hostile_answers_score_zero_and_never_raise():
    deep = "[" * 100_000 + "]" * 100_000
    graders = from_spec(spec_with(['{"a": 1}', '{"a": 2}']))
    assert graders.reward(deep, '{"a": 1}') == 0.0
    assert graders.reward('{"a": NaN}', '{"a": 1}') == 0.0
    every_kind = from_spec(spec_with(["x"], [{"kind": "valid_json"}, {"kind": "json_values"},
                                             {"kind": "json_schema", "schema": {"type": "array"}}]))
    assert every_kind.reward(deep, "[]") == 0.0


def test_every_kind_is_documented_in_docs_evaluation():
    doc = (ROOT / "docs" / "evaluation.md").read_text()
    section = doc[doc.index("## Graders"):]
    assert all(f"`{kind}`" in section for kind in KINDS)


TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)


@settings(max_examples=150, deadline=None)
@given(outputs=st.lists(st.one_of(TEXT, st.sampled_from(["yes", "no", "42", "-1.5", '{"k": 1}', "[1]"])),
                        min_size=1, max_size=8), answer=TEXT)
def test_derived_graders_pass_their_own_references_and_rewards_stay_in_range(outputs, answer):
    graders: GraderSet = from_spec(spec_with(outputs))
    assert all(check.failed == () for check in graders.check_references(outputs))
    for reference in outputs:
        assert 0.0 <= graders.reward(answer, reference) <= 1.0
        assert graders.passes(reference, reference)


EVERY_KIND = [{"kind": "exact"}, {"kind": "token_f1"}, {"kind": "label", "labels": ["yes", "no"]},
              {"kind": "regex", "pattern": r"\w+"}, {"kind": "number", "relative": 0.1}, {"kind": "max_chars", "max": 8},
              {"kind": "valid_json"}, {"kind": "json_fields", "fields": ["k"]}, {"kind": "json_shape"},
              {"kind": "json_values"}, {"kind": "json_schema", "schema": {"type": "object", "required": ["k"]}}]


@settings(max_examples=200, deadline=None)
@given(answer=st.one_of(TEXT, st.sampled_from(['{"k": 1}', '{"k": "x", "j": [1]}', "[[[[", "1e999", "-0.0"])),
       reference=st.one_of(TEXT, st.sampled_from(["yes", '{"k": 2}', "12", "[1, 2]"])))
def test_every_kind_scores_in_range_and_passes_exactly_at_its_threshold(answer, reference):
    graders = from_spec(spec_with(["x"], EVERY_KIND))
    assert set(KINDS) == {g.kind for g in graders.graders}
    for grader in graders.graders:
        value = grader.score(answer, reference)
        assert 0.0 <= value <= 1.0 and grader.passes(answer, reference) == (value >= grader.pass_at)
    assert 0.0 <= graders.reward(answer, reference) <= 1.0
