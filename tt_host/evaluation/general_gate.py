"""The general-regression gate: the tuned model must not get worse than its baseline on a general chat set.

Both models answer the same prompts in the engine's evaluation stages
(`general_prompts` in the request, `general_predictions` in the result); the
host joins the answers to the references it kept back and scores them with
the held-out scorer (tt_host.evaluation.scoring): score = mean token F1, pass rate =
exact-match rate. The gate passes when

    baseline score − candidate score ≤ max_score_drop   and
    baseline pass rate − candidate pass rate ≤ max_pass_rate_drop.

The verdict is computed when the report is written, so a policy change only
re-writes the report; each row that passed on the baseline and fails on the
candidate is listed as a regression. A failed gate does not fail the run;
`tt models activate` refuses the model (tt_host.models.activation).
"""

from __future__ import annotations

import html
from typing import Any, Optional

from tt_host.engine import GATE_SIDES
from tt_host.evaluation.scoring import exact_match, score
from tt_host.spec.general import GeneralSet
from tt_host.spec.schema import GeneralRegression
from tt_stagekit.sides import BASELINE_SIDE, CANDIDATE_SIDE

MAX_LISTED = 50


def _side(predictions: dict[str, str], references: dict[str, str]) -> dict[str, Any]:
    metrics = score(predictions, references, "x")
    return {"score": metrics.get("x.token_f1"), "pass_rate": metrics.get("x.exact_match"), "count": metrics["x.count"]}


def evaluate(policy: GeneralRegression, data: GeneralSet, answers: dict[str, Optional[dict[str, str]]]) -> dict[str, Any]:
    """The gate section of report.json; `answers` maps "baseline"/"candidate" to predictions (None: not answered)."""
    section: dict[str, Any] = {
        "dataset": str(data.path), "dataset_sha256": data.sha256, "rows": len(data.rows),
        "policy": {"max_score_drop": policy.max_score_drop, "max_pass_rate_drop": policy.max_pass_rate_drop},
    }
    missing = [side for side in GATE_SIDES if answers.get(side) is None]
    if missing:
        return {**section, "status": "not run", "failures": [],
                "reason": f"no general-set answers from the {' and '.join(missing)} evaluation"}
    references = data.references()
    sides = {side: _side(answers[side], references) for side in GATE_SIDES}
    if any(sides[side]["count"] != len(references) for side in GATE_SIDES):
        counts = ", ".join(f"{side} {sides[side]['count']}" for side in GATE_SIDES)
        return {**section, **sides, "status": "not run", "failures": [],
                "reason": f"incomplete answers ({counts} of {len(references)} rows)"}
    delta = {key: sides[CANDIDATE_SIDE][key] - sides[BASELINE_SIDE][key] for key in ("score", "pass_rate")}
    failures = []
    if -delta["score"] > policy.max_score_drop + 1e-12:
        failures.append(f"score (token F1) dropped {-delta['score']:.4f} from {sides['baseline']['score']:.4f} to "
                        f"{sides['candidate']['score']:.4f}, more than max_score_drop {policy.max_score_drop}")
    if -delta["pass_rate"] > policy.max_pass_rate_drop + 1e-12:
        failures.append(f"pass rate (exact match) dropped {-delta['pass_rate']:.4f} from "
                        f"{sides['baseline']['pass_rate']:.4f} to {sides['candidate']['pass_rate']:.4f}, more than "
                        f"max_pass_rate_drop {policy.max_pass_rate_drop}")
    regressions = []
    for row in data.rows:
        ref = references[row["id"]]
        base, cand = answers[BASELINE_SIDE][row["id"]], answers[CANDIDATE_SIDE][row["id"]]
        if exact_match(base, ref) and not exact_match(cand, ref):
            regressions.append({"id": row["id"], "line": row["line"], "prompt": row["messages"][-2]["content"],
                                "reference": ref, "baseline": base, "candidate": cand})
    return {**section, **sides, "delta": delta, "status": "failed" if failures else "passed",
            "failures": failures, "regressions": regressions}


def markdown(gate: dict[str, Any]) -> list[str]:
    """The report.md section."""
    lines = ["## General-regression gate", "", f"- dataset: `{gate['dataset']}` ({gate['rows']} rows)",
             f"- verdict: **{gate['status']}**"]
    if gate["status"] == "not run":
        return lines + [f"- {gate.get('reason', '')}", ""]
    policy = gate["policy"]
    lines += ["", "| | baseline | candidate | change | allowed drop |", "|---|---|---|---|---|",
              f"| score (token F1) | {gate['baseline']['score']:.4f} | {gate['candidate']['score']:.4f} | "
              f"{gate['delta']['score']:+.4f} | {policy['max_score_drop']} |",
              f"| pass rate (exact match) | {gate['baseline']['pass_rate']:.4f} | {gate['candidate']['pass_rate']:.4f} "
              f"| {gate['delta']['pass_rate']:+.4f} | {policy['max_pass_rate_drop']} |", ""]
    lines += [f"- failure: {html.escape(failure, quote=False)}" for failure in gate["failures"]]
    if gate["regressions"]:
        lines += ["", f"Rows the baseline passed and the candidate fails ({len(gate['regressions'])}):", ""]
        for row in gate["regressions"][:MAX_LISTED]:
            lines.append(html.escape(f"- line {row['line']} ({row['id']}): expected {row['reference']!r}, "
                                     f"baseline {row['baseline']!r}, candidate {row['candidate']!r}", quote=False))
        if len(gate["regressions"]) > MAX_LISTED:
            lines.append(f"- … {len(gate['regressions']) - MAX_LISTED} more in report.json")
    lines.append("")
    return lines
