"""report.json and report.md for a run.

report.json always has `engine`, `status`, `stages` and `metrics`. report.md
shows the metrics in a table (base versus tuned side by side when both were
evaluated) and every series a stage returned as an SVG line chart written next
to it, drawn here without any plotting library.
"""

from __future__ import annotations

import html
import math
from pathlib import Path
from typing import Any

from tt_host.fsutil import write_json_atomic, write_text_atomic

COMPARE = (("baseline", "candidate"),)


def build_report(state: dict[str, Any], metrics: dict[str, Any], series: dict[str, list], notes: list[str],
                 models: list[dict[str, Any]], actions: dict[str, str] | None = None) -> dict[str, Any]:
    """`actions`: what this invocation did with each stage ("ran", "resumed", "ran again", "reused",
    "skipped"); a stage it did not reach has none."""
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
    }


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return html.escape(str(value))


def svg_chart(title: str, points: list, width: int = 560, height: int = 240) -> str:
    pts = [(float(x), float(y)) for x, y in points if y is not None and math.isfinite(float(y))]
    pad = 40
    if not pts:
        pts = [(0.0, 0.0)]
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    x0, x1 = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
    y0, y1 = min(ys), max(ys) if max(ys) > min(ys) else min(ys) + 1

    def sx(x: float) -> float:
        return pad + (x - x0) / (x1 - x0) * (width - 2 * pad)

    def sy(y: float) -> float:
        return height - pad - (y - y0) / (y1 - y0) * (height - 2 * pad)

    path = " ".join(f"{'M' if i == 0 else 'L'}{sx(x):.1f},{sy(y):.1f}" for i, (x, y) in enumerate(pts))
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}">'
        f'<rect width="100%" height="100%" fill="white"/>'
        f'<text x="{width / 2}" y="18" text-anchor="middle" font-family="sans-serif" font-size="13">{html.escape(title)}</text>'
        f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" stroke="#888"/>'
        f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{height - pad}" stroke="#888"/>'
        f'<text x="{pad}" y="{height - pad + 16}" font-family="sans-serif" font-size="10">{x0:g}</text>'
        f'<text x="{width - pad}" y="{height - pad + 16}" text-anchor="end" font-family="sans-serif" font-size="10">{x1:g}</text>'
        f'<text x="{pad - 4}" y="{pad + 4}" text-anchor="end" font-family="sans-serif" font-size="10">{y1:.3g}</text>'
        f'<text x="{pad - 4}" y="{height - pad}" text-anchor="end" font-family="sans-serif" font-size="10">{y0:.3g}</text>'
        f'<path d="{path}" fill="none" stroke="#1f77b4" stroke-width="1.6"/></svg>\n'
    )


def render_markdown(report: dict[str, Any], charts: list[tuple[str, str]]) -> str:
    lines = [f"# tt run {report['run_id']}", "",
             f"- spec: **{_fmt(report.get('spec_name'))}**", f"- engine: `{report['engine']}`",
             f"- status: **{report['status']}**", ""]
    metrics = dict(report["metrics"])
    for left, right in COMPARE:
        names = sorted({k.split(".", 1)[1] for k in metrics if k.startswith(left + ".") or k.startswith(right + ".")})
        if names:
            lines += ["## Base versus tuned", "", f"| metric | {left} | {right} |", "|---|---|---|"]
            for name in names:
                lines.append(f"| {name} | {_fmt(metrics.pop(f'{left}.{name}', '—'))} | {_fmt(metrics.pop(f'{right}.{name}', '—'))} |")
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
    if charts:
        lines += ["## Curves", ""]
        lines += [f"![{title}]({file})" for title, file in charts]
        lines.append("")
    if report.get("notes"):
        lines += ["## Notes", ""] + [f"- {html.escape(n)}" for n in report["notes"]] + [""]
    if report.get("models"):
        lines += ["## Models", ""] + [f"- `{m['id']}` ({m['kind']}): `{m['path']}`" for m in report["models"]] + [""]
    return "\n".join(lines)


def write_report(run_path: Path, report: dict[str, Any], series: dict[str, list]) -> None:
    charts = []
    for name, points in sorted(series.items()):
        file = f"report-{name.replace('.', '-')}.svg"
        write_text_atomic(run_path / file, svg_chart(name, points))
        charts.append((name, file))
    write_json_atomic(run_path / "report.json", report)
    write_text_atomic(run_path / "report.md", render_markdown(report, charts))
