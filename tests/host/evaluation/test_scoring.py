"""The answer metrics (tt_stagekit.scoring, used by the host and the engines) and the host's id join."""

from __future__ import annotations

import pytest

from tt_host.evaluation import scoring


@pytest.mark.parametrize(
    ("prediction", "reference", "expected"),
    [
        ("Paris.", "paris", 1.0),
        ("  The   answer\nis 42 ", "the answer is 42", 1.0),
        ("ＡＢＣ", "abc", 1.0),  # NFKC folds full-width letters
        ("STRASSE", "straße", 1.0),  # case folding, not lower()
        ("42", "43", 0.0),
        ("a, b", "a b", 0.0),  # inner punctuation counts
    ],
)
def test_exact_match_normalizes_case_width_whitespace_and_edges(prediction, reference, expected):
    assert scoring.exact_match(prediction, reference) == expected


def test_token_f1_is_squad_style():
    assert scoring.token_f1("the cat sat", "the cat sat") == 1.0
    assert scoring.token_f1("", "") == 1.0
    assert scoring.token_f1("dog", "cat") == 0.0
    assert scoring.token_f1("the cat", "the cat sat down") == pytest.approx(2 * 1.0 * 0.5 / 1.5)


def test_json_field_match_counts_reproduced_top_level_fields():
    reference = '{"name": "Ada", "year": 1843, "tags": ["x"]}'
    assert scoring.json_field_match('{"name": "Ada", "year": 1843, "tags": ["x"]}', reference) == 1.0
    assert scoring.json_field_match(' {"name": "Ada", "year": 1842} ', reference) == pytest.approx(1 / 3)
    assert scoring.json_field_match("not json", reference) == 0.0
    assert scoring.json_field_match("[1, 2]", reference) == 0.0
    assert scoring.json_field_match('{"a": 1}', "plain text") is None
    assert scoring.json_field_match('{"a": 1}', "{}") is None


def test_score_joins_by_id_and_reports_json_only_when_some_reference_is_json():
    references = {"a": "Paris", "b": '{"k": 1}', "c": "never answered"}
    predictions = {"a": "paris!", "b": '{"k": 2}', "zz": "unknown id"}
    metrics = scoring.score(predictions, references, "candidate")
    assert metrics["candidate.count"] == 2
    assert metrics["candidate.exact_match"] == 0.5
    assert metrics["candidate.json_field_match"] == 0.0
    plain = scoring.score({"a": "Paris"}, {"a": "Paris"}, "baseline")
    assert plain == {"baseline.count": 1, "baseline.exact_match": 1.0, "baseline.token_f1": 1.0}
    assert scoring.score({}, references, "x") == {"x.count": 0}
