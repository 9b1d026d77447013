"""report.json, report.md and report.html for a run.

report.json always has `engine`, `status`, `stages`, `metrics` and `verdict` (tt_host.runs.verdict: held-out
exact match base → tuned, the gates' verdict, where the predictions are), `predictions` when a stage evaluated
held-out prompts, `curve_warnings` for each series that went the wrong way (tt_host.runs.charts), and `tuning` when a
tuning stage followed SFT (tt_host.runs.tuning_gate). report.md opens with the verdict (and, when the final model
is worse than SFT, says so next), shows the metrics in a table (base, SFT and final side by side when evaluated),
the held-out predictions, and every series a stage returned as an SVG chart written next to it; report.html
(tt_host.runs.report_html) is the same document in one self-contained file, the charts inline.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any, Optional

from tt_host.fsutil import write_json_atomic, write_text_atomic
from tt_host.runs.charts import svg_chart, wrong_way
from tt_host.runs.tuning_gate import SFT_SIDE, tuning_section
from tt_host.runs.verdict import markdown_table, verdict_line

SIDES = ("baseline", SFT_SIDE, "candidate")  # base, SFT (when a tuning stage followed it) and the final model


def build_report(state: dict[str, Any], metrics: dict[str, Any], series: dict[str, list], notes: list[str],
                 models: list[dict[str, Any]], actions: dict[str, str] | None = None,
                 predictions: Optional[list[dict[str, Any]]] = None) -> dict[str, Any]:
    """`actions`: what this invocation did with each stage ("ran", "resumed", "ran again", "reused",
    "skipped"); a stage it did not reach has none. `predictions`: tt_host.runs.verdict.prediction_rows."""
    actions = actions or {}
    return {
        "engine": state["engine"],
        "status": state["status"],
        "run_id": state["id"],
        "spec_name": state.get("spec_name"),
        "system_message_sha256": state.get("system_message_sha256"),
        "stages": {
            name: {**{k: s.get(k) for k in ("state", "seconds", "exit_code", "error") if s.get(k) is not None},
                   **({"this_run": actions[name]} if name in actions else {})}
            for name, s in state["stages"].items()
        },
        "metrics": dict(sorted(metrics.items())),
        "notes": notes,
        "models": [{"id": m["id"], "kind": m["kind"], "path": m["path"],
                    **({"version": m["version"]} if "version" in m else {})} for m in models],
        **({"predictions": predictions} if predictions else {}),
    }


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return html.escape(str(value))


def _paired(report: dict[str, Any]) -> dict[str, Any]:
    """The metrics, a held-out side scored under its stage's name (an engine's tuned model under its evaluating
    stage's: report.json `held_out_sides`) shown under the side's, for each score the other side has too."""
    metrics, sides = dict(report["metrics"]), report.get("held_out_sides") or {}
    for side, other in (("baseline", "candidate"), ("candidate", "baseline")):
        prefix, other_prefix = sides.get(side, side), sides.get(other, other)
        for key in [k for k in metrics if prefix != side and k.startswith(prefix + ".")]:
            if f"{other_prefix}.{key[len(prefix) + 1:]}" in metrics:
                metrics.setdefault(f"{side}.{key[len(prefix) + 1:]}", metrics.pop(key))
    return metrics


def render_markdown(report: dict[str, Any], charts: list[tuple[str, str]]) -> str:
    lines = [f"# tt run {report['run_id']}", "", f"**{_fmt(report.get('verdict') or verdict_line(report))}**", ""]
    if (report.get("tuning") or {}).get("message"):
        lines += [f"**{_fmt(report['tuning']['message'])}**", ""]
    lines += [f"- spec: **{_fmt(report.get('spec_name'))}**", f"- engine: `{report['engine']}`",
              f"- status: **{report['status']}**", ""]
    metrics = _paired(report)
    # the SFT column only when an `sft` stage evaluated (held_out_sides), never for an engine's own stage named so
    sides = [s for s in SIDES if s != SFT_SIDE or SFT_SIDE in (report.get("held_out_sides") or {})]
    names = sorted({k.split(".", 1)[1] for k in metrics if k.split(".", 1)[0] in sides and "." in k})
    if names:
        title = "Base, SFT and final" if SFT_SIDE in sides else "Base versus tuned"
        lines += [f"## {title}", "", "| metric | " + " | ".join(sides) + " |", "|---" * (len(sides) + 1) + "|"]
        for name in names:
            lines.append(f"| {name} | " + " | ".join(_fmt(metrics.pop(f"{side}.{name}", "—")) for side in sides) + " |")
        lines.append("")
    if metrics:
        lines += ["## Metrics", "", "| metric | value |", "|---|---|"]
        lines += [f"| {name} | {_fmt(value)} |" for name, value in metrics.items()]
        lines.append("")
    lines += ["## Stages", "", "| stage | state | this run | seconds |", "|---|---|---|---|"]
    for name, stage in report["stages"].items():
        seconds = stage.get("seconds")
        lines.append(f"| {name} | {stage.get('state')} | {stage.get('this_run', '')} | "
                     f"{'' if seconds is None else f'{seconds:.1f}'} |")
    lines.append("")
    if report.get("general_regression"):
        from tt_host.evaluation.general_gate import markdown

        lines += markdown(report["general_regression"])
    if report.get("benchmarks"):
        from tt_host.evaluation.benchmark_gate import markdown as benchmarks_markdown

        lines += benchmarks_markdown(report["benchmarks"])
    lines += markdown_table(report.get("predictions") or [])
    if charts:
        lines += ["## Curves", ""]
        for title, file in charts:
            lines += [f"![{title}]({file})", ""]
            lines += [f"- **wrong way:** {_fmt(w)}" for w in report.get("curve_warnings", []) if w.startswith(title + " ")]
        lines.append("")
    if report.get("notes"):
        lines += ["## Notes", ""] + [f"- {html.escape(n)}" for n in report["notes"]] + [""]
    if report.get("models"):
        lines += ["## Models", ""] + [f"- `{m['id']}` ({m['kind']}): `{m['path']}`" for m in report["models"]] + [""]
    return "\n".join(lines)


def write_report(run_path: Path, report: dict[str, Any], series: dict[str, list]) -> None:
    """Write report.json, report.md, report.html and one SVG per series; `report` gains its `verdict` and
    `curve_warnings` (the caller's dict: `tt run` prints the verdict from it)."""
    from tt_host.runs.report_html import render_html

    charts, svgs = [], {}
    warnings = {name: wrong_way(name, points) for name, points in sorted(series.items())}
    report["curve_warnings"] = [w for w in warnings.values() if w]
    if (tuning := tuning_section(report)) is not None:
        report["tuning"] = tuning
    report["verdict"] = verdict_line(report)
    for name, points in sorted(series.items()):
        file = f"report-{name.replace('.', '-')}.svg"
        svgs[file] = svg_chart(name, points, warnings[name])
        write_text_atomic(run_path / file, svgs[file])
        charts.append((name, file))
    write_json_atomic(run_path / "report.json", report)
    markdown = render_markdown(report, charts)
    write_text_atomic(run_path / "report.md", markdown)
    write_text_atomic(run_path / "report.html", render_html(markdown, svgs, f"tt run {report['run_id']}"))
