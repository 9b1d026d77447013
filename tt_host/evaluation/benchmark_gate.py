"""The benchmark half of the gate: each lm-eval task's metric must not drop more than its `max_drop`.

The baseline and candidate stages run the spec's `evaluation.benchmarks`
with lm-evaluation-harness and return `{task: {metric: value}}` (result.json
`benchmarks`, docs/protocol.md). Per task the gate compares one metric (the
task's `metric`, else the first the task reports) and fails when

    baseline value − candidate value > max_drop.

As for the general-regression set, the verdict is computed when the report
is written, so a change of `metric` or `max_drop` only re-writes the report;
`tt models activate` refuses a model whose benchmarks failed or were not run
(tt_host.models.activation).
"""

from __future__ import annotations

import html
from typing import Any, Optional

from tt_host.engine import GATE_SIDES
from tt_host.spec.schema import Benchmarks
from tt_stagekit.sides import BASELINE_SIDE, CANDIDATE_SIDE


def _task_verdict(task, scores: dict[str, Optional[dict[str, Any]]]) -> dict[str, Any]:
    row: dict[str, Any] = {"task": task.task, "max_drop": task.max_drop}
    tables = {side: (scores.get(side) or {}).get(task.task) for side in GATE_SIDES}
    missing = [side for side in GATE_SIDES if not isinstance(tables[side], dict) or not tables[side]]
    if missing:
        return {**row, "status": "not run", "reason": f"no scores from the {' and '.join(missing)} evaluation"}
    metric = task.metric or next(iter(tables[BASELINE_SIDE]))
    values = {side: tables[side].get(metric) for side in GATE_SIDES}
    if any(not isinstance(value, (int, float)) for value in values.values()):
        reported = ", ".join(sorted(tables[BASELINE_SIDE]))
        return {**row, "metric": metric, "status": "not run",
                "reason": f"metric {metric!r} was not reported (the task reports: {reported})"}
    delta = values[CANDIDATE_SIDE] - values[BASELINE_SIDE]
    row.update(metric=metric, baseline=values[BASELINE_SIDE], candidate=values[CANDIDATE_SIDE], delta=delta)
    if -delta > task.max_drop + 1e-12:
        return {**row, "status": "failed",
                "failure": f"{task.task} {metric} dropped {-delta:.4f} from {values['baseline']:.4f} to "
                           f"{values['candidate']:.4f}, more than max_drop {task.max_drop}"}
    return {**row, "status": "passed"}


def evaluate(policy: Benchmarks, scores: dict[str, Optional[dict[str, Any]]]) -> dict[str, Any]:
    """The `benchmarks` section of report.json; `scores` maps "baseline"/"candidate" to a stage's `benchmarks`."""
    tasks = [_task_verdict(task, scores) for task in policy.tasks]
    statuses = {row["status"] for row in tasks}
    status = "failed" if "failed" in statuses else "not run" if "not run" in statuses else "passed"
    section = {"status": status, "limit": policy.limit, "num_fewshot": policy.num_fewshot, "tasks": tasks,
               "failures": [row["failure"] for row in tasks if row["status"] == "failed"]}
    if status == "not run":
        section["reason"] = "; ".join(f"{row['task']}: {row['reason']}" for row in tasks if row["status"] == "not run")
    return section


def markdown(section: dict[str, Any]) -> list[str]:
    """The report.md section."""
    lines = ["## Benchmarks (lm-evaluation-harness)", "", f"- verdict: **{section['status']}**",
             f"- limit: {section['limit'] or 'all documents'}, few-shot: {section['num_fewshot']}", "",
             "| task | metric | baseline | candidate | change | allowed drop | verdict |",
             "|---|---|---|---|---|---|---|"]
    for row in section["tasks"]:
        task = html.escape(row["task"], quote=False)
        if "delta" in row:
            lines.append(f"| {task} | {row['metric']} | {row['baseline']:.4f} | {row['candidate']:.4f} | "
                         f"{row['delta']:+.4f} | {row['max_drop']} | {row['status']} |")
        else:
            lines.append(f"| {task} | {row.get('metric', '')} | | | | {row['max_drop']} | "
                         f"{row['status']}: {html.escape(row['reason'], quote=False)} |")
    lines.append("")
    lines += [f"- failure: {html.escape(failure, quote=False)}" for failure in section["failures"]]
    return lines + ([""] if section["failures"] else [])
