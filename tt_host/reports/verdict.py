"""A run's verdict: did the model learn? One line, and the held-out predictions behind it.

`prediction_rows` joins the held-out prompts, their references (kept on the host) and each evaluating
side's answer (baseline: the base model, candidate: the tuned one) into the rows report.json keeps under
`predictions`; a row passes when the tuned answer is an exact match (tt_stagekit.scoring), and carries each
side's grader score (the spec's graders' mean, docs/evaluation.md "Graders"), a column of report.md's
table. `verdict_line` is the last line `tt run` prints and the first line of report.md:

    held-out exact match 0/11 → 8/11 · grader score 0.05 → 0.78 · gate passed · predictions: tt runs report RUN_ID (report.html)

The grader score (the mean of the spec's graders, docs/evaluation.md "Graders") stands beside exact match
when the run scored with graders; the count stays exact match, comparable with every earlier run.

`clean` makes a text safe for a terminal, a Markdown table cell and an HTML cell: the characters a terminal
acts on dropped (tt_host.terminal.UNSAFE, tt's one control-character rule), tabs dropped and new lines shown as
⏎ (one line), long texts cut with an ellipsis. `cell` is a report.md text: `clean`, then HTML-escaped (a prompt's
`<script>` is text in every Markdown viewer, never markup) with `|` escaped for a table; every text report.md
takes from a spec, a dataset, a model or an engine goes through it.
"""

from __future__ import annotations

import html
from typing import Any, Optional

from tt_host.evaluation.scoring import exact_match, guarded
from tt_host.terminal import UNSAFE
from tt_stagekit.graders import GraderSet
from tt_stagekit.sides import BASELINE_SIDE, CANDIDATE_SIDE, EVALUATING_SIDES, SFT_SIDE

SIDES = (BASELINE_SIDE, CANDIDATE_SIDE)  # the two sides every verdict compares (SFT too when it answered)
CELL_CHARS = 120  # a table cell's text is cut here; report.json keeps the whole text


def clean(text: Any, limit: int = CELL_CHARS) -> str:
    """One line of printable text, at most `limit` characters (an ellipsis marks a cut)."""
    shown = UNSAFE.sub("", "" if text is None else str(text)).replace("\t", "").replace("\n", " ⏎ ")
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def cell(text: Any, limit: int = CELL_CHARS) -> str:
    """`clean(text, limit)` as report.md writes it: HTML-escaped and `|` escaped (one table cell)."""
    return html.escape(clean(text, limit), quote=False).replace("|", "\\|")


def prediction_rows(eval_rows: list[dict], answers: dict[str, dict[str, str]],
                    graders: Optional[GraderSet] = None) -> list[dict[str, Any]]:
    """One row per held-out prompt: id, prompt (its user turn), reference, baseline and candidate answers (None
    where that side did not answer) and `pass` (the candidate's answer matches, None without one); with the
    spec's `graders`, `grader_score` ({side: the graders' mean score, None where it did not answer})."""
    rows = []
    for row in eval_rows:
        reference = row["messages"][-1]["content"]
        user = [m["content"] for m in row["messages"][:-1] if m.get("role") == "user"]
        out = {"id": row["id"], "prompt": "\n".join(user), "reference": reference}
        for side in SIDES + ((SFT_SIDE,) if SFT_SIDE in answers else ()):
            out[side] = (answers.get(side) or {}).get(row["id"])
        out["pass"] = None if out[CANDIDATE_SIDE] is None else bool(exact_match(out[CANDIDATE_SIDE], reference))
        rows.append(out)
    if graders is not None:
        with guarded(graders):
            for out in rows:
                out["grader_score"] = {side: None if out[side] is None else graders.reward(out[side], out["reference"])
                                       for side in EVALUATING_SIDES if side in out}
    return rows


def _scores(row: dict[str, Any], sides: tuple[str, ...] = SIDES) -> str:
    """A row's grader scores, "0.50 → 1.00" (— for a side that did not answer), one per side of `sides`."""
    scores = row.get("grader_score") or {}
    return " → ".join("—" if scores.get(side) is None else f"{scores[side]:.2f}" for side in sides)


def _count(report: dict[str, Any], side: str) -> str | None:
    """"hits/count" of a side; its metrics are under the prefix of the stage that evaluated it (report.json's
    `held_out_sides`: an engine may score its tuned model as `chat_eval`), else under the side's name."""
    prefix = (report.get("held_out_sides") or {}).get(side, side)
    metrics = report.get("metrics") or {}
    count, rate = metrics.get(f"{prefix}.count"), metrics.get(f"{prefix}.exact_match")
    if not isinstance(count, int) or not isinstance(rate, (int, float)):
        return None
    return f"{round(rate * count)}/{count}"


def _grader_score(report: dict[str, Any], side: str) -> float | None:
    prefix = (report.get("held_out_sides") or {}).get(side, side)
    value = (report.get("metrics") or {}).get(f"{prefix}.grader_score")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _graders_said(report: dict[str, Any]) -> str:
    """" · grader score B → T" (or the one side scored), or "" when no side was scored with graders."""
    base, tuned = _grader_score(report, BASELINE_SIDE), _grader_score(report, CANDIDATE_SIDE)
    sft = _grader_score(report, SFT_SIDE) if SFT_SIDE in (report.get("held_out_sides") or {}) else None
    if base is not None and tuned is not None:  # SFT between them when a tuning stage followed it
        return f" · grader score {base:.2f} → " + ("" if sft is None else f"{sft:.2f} (SFT) → ") + f"{tuned:.2f}"
    if base is not None or tuned is not None:
        return f" · grader score {base if tuned is None else tuned:.2f}"
    return ""


def tuned_score(report: dict[str, Any]) -> str:
    """The tuned model's held-out figures for a list: "8/11 · 0.78" (exact match, grader score), "—" when none."""
    count, grader = _count(report, CANDIDATE_SIDE), _grader_score(report, CANDIDATE_SIDE)
    said = [part for part in (count, None if grader is None else f"{grader:.2f}") if part]
    return " · ".join(said) or "—"


def gate_verdict(report: dict[str, Any]) -> str:
    """The gates' verdict in words: general-regression and benchmark gates, or that none is configured."""
    found = []
    for key, label in (("general_regression", "general-regression gate"), ("benchmarks", "benchmark gate")):
        section = report.get(key)
        if isinstance(section, dict) and section.get("status"):
            found.append(f"{label} {section['status']}")
    return " and ".join(found) if found else "no gate configured"


def verdict_line(report: dict[str, Any]) -> str:
    """The run's verdict in one line (see the module docstring); a run that evaluated nothing says so."""
    base, tuned = _count(report, BASELINE_SIDE), _count(report, CANDIDATE_SIDE)
    # a tuning stage followed SFT (tt_host.evaluation.tuning_gate); not an engine's own stage named `sft`
    sft = _count(report, SFT_SIDE) if SFT_SIDE in (report.get("held_out_sides") or {}) else None
    if tuned is not None and base is not None:
        score = f"held-out exact match {base} → {tuned}" if sft is None else \
            f"held-out exact match {base} → {sft} (SFT) → {tuned}"
    elif tuned is not None:
        score = f"held-out exact match {tuned} (tuned; the base model was not evaluated)"
    elif base is not None:
        score = f"held-out exact match {base} (base only; the tuned model was not evaluated)"
    else:
        score = "no held-out score (no evaluating stage finished)"
    where = (f"predictions: tt runs report {report.get('run_id')} (report.md, report.html)"
             if report.get("predictions") else "no predictions")
    worse = " · WORSE than SFT (activation needs --force)" if (report.get("tuning") or {}).get("worse_than_sft") else ""
    return clean(f"{score}{_graders_said(report)}{worse} · {gate_verdict(report)} · {where}", limit=400)


def markdown_table(rows: list[dict[str, Any]], limit: int = 100) -> list[str]:
    """The report.md section: a predictions table (the first `limit` rows; report.json has them all)."""
    if not rows:
        return []
    graded = any("grader_score" in row for row in rows)
    sides = EVALUATING_SIDES if SFT_SIDE in rows[0] else SIDES
    heads = {BASELINE_SIDE: "base", SFT_SIDE: "SFT", CANDIDATE_SIDE: "tuned"}
    said = " → ".join(heads[s] for s in sides)
    lines = ["## Held-out predictions", "", "| # | prompt | reference | " + " | ".join(heads[s] for s in sides) + " | pass |"
             + (f" graders ({said}) |" if graded else ""), "|---" * (len(sides) + 4) + "|" + ("---|" if graded else "")]
    for number, row in enumerate(rows[:limit], 1):
        cells = [cell(row.get(k)) if row.get(k) is not None else "—"
                 for k in ("prompt", "reference", *sides)]
        verdict = {True: "pass", False: "FAIL", None: "—"}[row.get("pass")]
        lines.append(f"| {number} | " + " | ".join(cells) + f" | {verdict} |" + (f" {_scores(row, sides)} |" if graded else ""))
    if len(rows) > limit:
        lines.append(f"\n{len(rows) - limit} more rows in report.json (`predictions`).")
    return lines + [""]
