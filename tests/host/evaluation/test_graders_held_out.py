"""The held-out report scores predictions with the spec's graders beside exact match and F1 (docs/evaluation.md
"Graders in the report"): metrics per grader and overall, the verdict's grader score, report.md's tables and
each prediction's grader score; a
regex grader's match on a hostile prediction is cut off by its time limit and scores 0; changing the graders
re-runs no stage, only the report."""

import json

from conftest import echo_spec, write_spec
from tt_host.evaluation import scoring
from tt_stagekit.graders import from_spec


def graded_spec() -> dict:
    spec = echo_spec(steps=2, baseline=True)
    spec["evaluation"] = {"graders": [{"kind": "number", "name": "city_number"}]}
    return spec


def test_a_run_scores_held_out_predictions_with_the_graders_beside_exact_match(tt, tmp_path):
    # The echo engine answers a held-out prompt with the prompt itself: "Capital of country 3?" is not the
    # reference "City 3" (exact match 0), but its last number is (the number grader passes every row).
    path = write_spec(tmp_path / "s", graded_spec())
    proc = tt("run", path, check=True)
    run = next((tmp_path / "s" / ".tuned-tensor" / "runs").iterdir())
    report = json.loads((run / "report.json").read_text())
    metrics = report["metrics"]
    for side in ("baseline", "candidate"):
        assert metrics[f"{side}.exact_match"] == 0.0 and metrics[f"{side}.count"] == 3
        assert metrics[f"{side}.graders.city_number"] == 1.0
        assert metrics[f"{side}.grader_score"] == 1.0 and metrics[f"{side}.grader_pass_rate"] == 1.0
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("held-out exact match 0/3 → 0/3 · grader score 1.00 → 1.00 · no gate configured"), last
    markdown = (run / "report.md").read_text()
    assert "| graders.city_number | 1 | 1 |" in markdown and "| grader_score | 1 | 1 |" in markdown
    assert [row["grader_score"] for row in report["predictions"]] == [{"baseline": 1.0, "candidate": 1.0}] * 3
    assert "| pass | graders (base → tuned) |" in markdown
    assert sum(line.endswith("| FAIL | 1.00 → 1.00 |") for line in markdown.splitlines()) == 3

    # Only the graders change: every stage is reused, the report scores with the new ones.
    spec = graded_spec()
    spec["evaluation"] = {"graders": [{"kind": "regex", "name": "city", "pattern": r"City \d+"}]}
    write_spec(tmp_path / "s", spec)
    code, out = tt.json("run", path, "--resume", run)
    assert code == 0, out
    assert set(out["report"]["stages"][name]["this_run"] for name in out["report"]["stages"]) == {"reused"}, out
    metrics = json.loads((run / "report.json").read_text())["metrics"]
    assert metrics["candidate.graders.city"] == 0.0 and "candidate.graders.city_number" not in metrics


def test_a_hostile_prediction_against_a_regex_grader_is_cut_off_and_scores_zero(monkeypatch):
    monkeypatch.setattr(scoring, "REGEX_SECONDS", 1.0)
    graders = from_spec({"examples": [{"input": "q", "output": "ax"}],
                         "evaluation": {"graders": [{"kind": "regex", "pattern": ".*.*.*.*.*.*.*.*x"},
                                                    {"kind": "max_chars", "max": 5000}]}})
    metrics = scoring.grader_metrics(graders, ["p" * 4000, "ax"], ["ax", "ax"], "candidate")
    assert metrics == {"candidate.graders.regex": 0.5, "candidate.graders.max_chars": 1.0,
                       "candidate.grader_score": 0.75, "candidate.grader_pass_rate": 0.5}
    assert graders.graders[0].matcher("ax")  # the in-process matcher is back after scoring
