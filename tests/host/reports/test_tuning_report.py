"""A run with a tuning stage after SFT: the report shows base, SFT and final side by side, says in its first lines
when the final model is worse than SFT, and activation's gate then fails (so `tt models activate` needs --force)."""

from __future__ import annotations

import json
from pathlib import Path

from tt_host.models.activation import gate_of
from tt_host.reports.ending import COMPLETED, Ending, Tally
from tt_host.reports.report import build_report, write_report
from tt_host.reports.verdict import markdown_table, prediction_rows


def _ending(metrics: dict, sides: dict, engine: str = "adapter") -> Ending:
    """A completed run's ending with these held-out metrics and sides."""
    state = {"engine": engine, "status": "completed", "id": "r1", "spec_name": "s", "stages": {}}
    return Ending(COMPLETED, state, Path("spec.json"), Path("run"), Tally(metrics=metrics, held_out_sides=sides))


def _report(sft_rate: float, final_rate: float, grader: tuple[float, float] | None = None,
            sft: bool = True) -> Ending:
    metrics = {"baseline.count": 10, "baseline.exact_match": 0.1, "sft.count": 10, "sft.exact_match": sft_rate,
               "candidate.count": 10, "candidate.exact_match": final_rate}
    if grader:
        metrics.update({"baseline.grader_score": 0.2, "sft.grader_score": grader[0], "candidate.grader_score": grader[1]})
    sides = {"baseline": "baseline", "sft": "sft", "candidate": "candidate"}
    if not sft:
        sides.pop("sft")
        for key in ("sft.count", "sft.exact_match"):
            metrics.pop(key)
    return _ending(metrics, sides)


def _write(folder: Path, ending: Ending) -> None:
    write_report(folder, build_report(ending), ending.tally.series)


def test_a_final_model_worse_than_sft_is_said_first_and_fails_the_activation_gate(tmp_path):
    _write(tmp_path, _report(0.8, 0.5))
    saved = json.loads((tmp_path / "report.json").read_text())
    assert saved["tuning"]["worse_than_sft"] is True and saved["tuning"]["metric"] == "exact_match"
    assert (saved["tuning"]["base"], saved["tuning"]["sft"], saved["tuning"]["final"]) == (0.1, 0.8, 0.5)
    assert "1/10 → 8/10 (SFT) → 5/10" in saved["verdict"] and "WORSE than SFT" in saved["verdict"]
    head = (tmp_path / "report.md").read_text().splitlines()[:6]
    assert any("WORSE than SFT on the held-out set" in line and "--force" in line for line in head), head
    table = (tmp_path / "report.md").read_text()
    assert "## Base, SFT and final" in table and "| exact_match | 0.1 | 0.8 | 0.5 |" in table
    gate = gate_of({"run_dir": str(tmp_path)})
    assert gate["status"] == "failed" and "WORSE than SFT" in gate["reason"], gate


def test_a_final_model_as_good_as_sft_passes_that_check_and_graders_decide_when_present(tmp_path):
    _write(tmp_path, _report(0.8, 0.8))
    assert json.loads((tmp_path / "report.json").read_text())["tuning"]["worse_than_sft"] is False
    assert gate_of({"run_dir": str(tmp_path)})["status"] == "not run"  # no gate configured: the usual answer
    graded = _report(0.8, 0.9, grader=(0.7, 0.6))  # exact match rose, the graders' score fell: graders decide
    _write(tmp_path, graded)
    saved = json.loads((tmp_path / "report.json").read_text())
    assert saved["tuning"]["metric"] == "grader_score" and saved["tuning"]["worse_than_sft"] is True
    assert "grader score 0.20 → 0.70 (SFT) → 0.60" in saved["verdict"], saved["verdict"]  # SFT on both figures


def test_a_run_without_sft_side_has_no_tuning_section_and_the_old_table(tmp_path):
    _write(tmp_path, _report(0.8, 0.5, sft=False))
    saved = json.loads((tmp_path / "report.json").read_text())
    assert "tuning" not in saved and "(SFT)" not in saved["verdict"]
    assert "## Base versus tuned" in (tmp_path / "report.md").read_text()


def test_the_predictions_table_has_an_sft_column_only_when_sft_answered():
    rows = [{"id": "e1", "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}]
    three = prediction_rows(rows, {"baseline": {"e1": "x"}, "sft": {"e1": "a"}, "candidate": {"e1": "b"}})
    assert three[0]["sft"] == "a" and "| base | SFT | tuned |" in markdown_table(three)[2]
    two = prediction_rows(rows, {"baseline": {"e1": "x"}, "candidate": {"e1": "b"}})
    assert "sft" not in two[0] and "| base | tuned |" in markdown_table(two)[2]


def test_an_engines_own_stage_named_sft_is_not_the_sft_side(tmp_path):
    # the foundation engine trains in a stage named `sft` (metrics sft.*) and evaluates no SFT side of its own
    metrics = {"baseline.count": 10, "baseline.exact_match": 0.1, "chat_eval.count": 10, "chat_eval.exact_match": 0.6,
               "sft.final_loss": 1.25, "sft.count": 10, "sft.exact_match": 0.0}
    _write(tmp_path, _ending(metrics, {"baseline": "baseline", "candidate": "chat_eval"}, engine="foundation"))
    saved = json.loads((tmp_path / "report.json").read_text())
    assert "1/10 → 6/10" in saved["verdict"] and "(SFT)" not in saved["verdict"], saved["verdict"]
    text = (tmp_path / "report.md").read_text()
    assert "## Base versus tuned" in text and "| exact_match | 0.1 | 0.6 |" in text, text


def test_a_final_model_worse_than_sft_fails_activation_behind_gates_that_passed(tmp_path):
    """The worse-than-SFT check is not a fallback for a spec without gates: a passing general-regression and
    benchmark gate do not let the final model through (`tt models activate` needs --force)."""
    _write(tmp_path, _report(0.8, 0.5))
    saved = json.loads((tmp_path / "report.json").read_text())  # the gates' sections as a run records them
    saved["general_regression"] = {"status": "passed", "failures": [], "dataset": "general.jsonl"}
    saved["benchmarks"] = {"status": "passed", "failures": []}
    (tmp_path / "report.json").write_text(json.dumps(saved))
    gate = gate_of({"run_dir": str(tmp_path)})
    assert gate["status"] == "failed" and "WORSE than SFT" in gate["reason"], gate
    assert any("WORSE than SFT" in failure for failure in gate["failures"]), gate
    saved["tuning"]["worse_than_sft"] = False  # the same gates, a final model as good as SFT: they decide
    (tmp_path / "report.json").write_text(json.dumps(saved))
    assert gate_of({"run_dir": str(tmp_path)})["status"] == "passed"
