"""report.json, report.md and report.html for a run: `build_report` decides every key, for every ending.

`build_report` turns a run's ending (tt_host.reports.ending.Ending: completed, failed, stopped, out of disk) into
report.json, and nothing else writes a key of it (tests/architecture/test_report_owner.py). Its keys, in order:

    engine, status, run_id, spec_name, system_message_sha256, stages (each with `this_run`: what this invocation
    did with it), metrics, notes, models;
    predictions         when a stage evaluated held-out prompts (tt_host.reports.verdict.prediction_rows)
    held_out_sides      when one did: each evaluating side's metric prefix (tt_stagekit.sides)
    general_regression  when the spec has that gate (tt_host.evaluation.general_gate)
    benchmarks          when the spec has benchmarks (tt_host.evaluation.benchmark_gate)
    error               when the run failed or stopped
    resume              when it stopped or ran out of disk: the command that resumes it
    curve_warnings      each series that went the wrong way (tt_host.reports.charts), always
    tuning              when a tuning stage followed SFT (tt_host.evaluation.tuning_gate)
    verdict             always (tt_host.reports.verdict: held-out exact match base → tuned, the gates, where the
                        predictions are)

report.md is made from that report alone: it opens with the verdict (and, when the final model is worse than
SFT, says so next), the scores side by side (base, SFT and final when evaluated), the gates, then every series a
stage returned as an SVG chart written next to it (rewards, held-out scores, losses, the rest: charts.chart_order;
a series that never moved is a line, not a chart), the held-out predictions, and only then the table of every
other metric, the stages, notes and models; report.html
(tt_host.reports.report_html) is the same document in one self-contained file, the charts inline.
"""

from __future__ import annotations

import hashlib
import html
import re
from pathlib import Path
from typing import Any

from tt_host.evaluation import benchmark_gate, general_gate
from tt_host.evaluation.tuning_gate import tuning_section
from tt_host.fsutil import write_json_atomic, write_text_atomic
from tt_host.reports.charts import chart_order, constant, svg_chart, wrong_way
from tt_host.reports.ending import RESUMABLE, Ending, resume_command
from tt_host.reports.verdict import cell, clean, markdown_table, prediction_rows, verdict_line
from tt_host.runlayout import REPORT_JSON, REPORT_MD
from tt_stagekit.sides import BASELINE_SIDE, CANDIDATE_SIDE, EVALUATING_SIDES, SFT_SIDE

_UNSAFE_FILE = re.compile(r"[^A-Za-z0-9_-]")
TEXT_CHARS = 1000  # a report.md line's text is cut here (report.json keeps it whole)


def build_report(ending: Ending) -> dict[str, Any]:
    """report.json for a run's `ending`: every key it has, in its order (the module docstring)."""
    state, tally = ending.state, ending.tally
    predictions = prediction_rows(ending.eval_rows, tally.answers, ending.graders) if tally.answers else None
    report: dict[str, Any] = {
        "engine": state["engine"],
        "status": state["status"],
        "run_id": state["id"],
        "spec_name": state.get("spec_name"),
        "system_message_sha256": state.get("system_message_sha256"),
        "stages": {
            name: {**{k: s.get(k) for k in ("state", "seconds", "exit_code", "error") if s.get(k) is not None},
                   **({"this_run": tally.actions[name]} if name in tally.actions else {})}
            for name, s in state["stages"].items()
        },
        "metrics": dict(sorted(tally.metrics.items())),
        "notes": tally.notes,
        "models": [{"id": m["id"], "kind": m["kind"], "path": m["path"],
                    **({"version": m["version"]} if "version" in m else {})} for m in tally.models],
        **({"predictions": predictions} if predictions else {}),
    }
    if tally.held_out_sides:
        report["held_out_sides"] = tally.held_out_sides
    if ending.general_policy is not None:
        report["general_regression"] = general_gate.evaluate(ending.general_policy, ending.general,
                                                             tally.general_answers)
    if ending.benchmarks is not None:
        report["benchmarks"] = benchmark_gate.evaluate(ending.benchmarks, tally.benchmark_scores)
    if ending.error:
        report["error"] = ending.error
    if ending.how in RESUMABLE:
        report["resume"] = resume_command(ending.spec_path, ending.run_path)
    report["curve_warnings"] = [w for w in _wrong_ways(tally.series).values() if w]
    if (tuning := tuning_section(report)) is not None:
        report["tuning"] = tuning
    report["verdict"] = verdict_line(report)
    return report


def _wrong_ways(series: dict[str, list]) -> dict[str, str | None]:
    """Each series' wrong-way sentence (tt_host.reports.charts.wrong_way), None where it went the right way."""
    return {name: wrong_way(name, points) for name, points in sorted(series.items())}


def _fmt(value: Any) -> str:
    """A table cell: a number as such, any other value a report.md text (tt_host.reports.verdict.cell)."""
    if isinstance(value, float):
        return f"{value:.4g}"
    return cell(value, TEXT_CHARS)


def _text(value: Any) -> str:
    """A line's text (not a cell): one line, control characters dropped, HTML-escaped."""
    return html.escape(clean(value, TEXT_CHARS), quote=False)


def _code(value: Any) -> str:
    """A `code` span's text: one line, control characters dropped, no backtick to end the span early."""
    return "`" + clean(value, TEXT_CHARS).replace("`", "'") + "`"


def _paired(report: dict[str, Any]) -> dict[str, Any]:
    """The metrics, a held-out side scored under its stage's name (an engine's tuned model under its evaluating
    stage's: report.json `held_out_sides`) shown under the side's, for each score the other side has too."""
    metrics, sides = dict(report["metrics"]), report.get("held_out_sides") or {}
    for side, other in ((BASELINE_SIDE, CANDIDATE_SIDE), (CANDIDATE_SIDE, BASELINE_SIDE)):
        prefix, other_prefix = sides.get(side, side), sides.get(other, other)
        for key in [k for k in metrics if prefix != side and k.startswith(prefix + ".")]:
            if f"{other_prefix}.{key[len(prefix) + 1:]}" in metrics:
                metrics.setdefault(f"{side}.{key[len(prefix) + 1:]}", metrics.pop(key))
    return metrics


def render_markdown(report: dict[str, Any], charts: list[tuple[str, str | None]]) -> str:
    """report.md: `charts` are (series name, its SVG file), in the order shown; (a sentence, None) for a series
    that never moved."""
    lines = [f"# tt run {_text(report['run_id'])}", "", f"**{_text(report.get('verdict') or verdict_line(report))}**", ""]
    if (report.get("tuning") or {}).get("message"):
        lines += [f"**{_text(report['tuning']['message'])}**", ""]
    lines += [f"- spec: **{_text(report.get('spec_name'))}**", f"- engine: {_code(report['engine'])}",
              f"- status: **{_text(report['status'])}**", ""]
    metrics = _paired(report)
    # the SFT column only when an `sft` stage evaluated (held_out_sides), never for an engine's own stage named so
    sides = [s for s in EVALUATING_SIDES if s != SFT_SIDE or SFT_SIDE in (report.get("held_out_sides") or {})]
    names = sorted({k.split(".", 1)[1] for k in metrics if k.split(".", 1)[0] in sides and "." in k})
    if names:
        title = "Base, SFT and final" if SFT_SIDE in sides else "Base versus tuned"
        lines += [f"## {title}", "", "| metric | " + " | ".join(sides) + " |", "|---" * (len(sides) + 1) + "|"]
        for name in names:
            lines.append(f"| {cell(name)} | " + " | ".join(_fmt(metrics.pop(f"{side}.{name}", "—")) for side in sides) + " |")
        lines.append("")
    if report.get("general_regression"):
        lines += general_gate.markdown(report["general_regression"])
    if report.get("benchmarks"):
        lines += benchmark_gate.markdown(report["benchmarks"])
    if charts:
        lines += ["## Curves", ""]
        for title, file in charts:
            if file is None:  # a series that never moved (GRPO's kl with kl_beta 0): said, not drawn
                lines += [f"- {_text(title)}", ""]
                continue
            lines += [f"![{cell(title)}]({file})", ""]
            lines += [f"- **check this curve:** {_text(w)}" for w in report.get("curve_warnings", [])
                      if w.startswith(title + " ")]
        lines.append("")
    lines += markdown_table(report.get("predictions") or [])
    if metrics:
        lines += ["## Metrics", "", "| metric | value |", "|---|---|"]
        lines += [f"| {cell(name)} | {_fmt(value)} |" for name, value in metrics.items()]
        lines.append("")
    lines += ["## Stages", "", "| stage | state | this run | seconds |", "|---|---|---|---|"]
    off = [name for name, stage in report["stages"].items() if stage.get("state") == "skipped"]
    for name, stage in report["stages"].items():
        seconds = stage.get("seconds")
        if name not in off:
            lines.append(f"| {cell(name)} | {cell(stage.get('state'))} | {cell(stage.get('this_run', ''))} | "
                         f"{'' if seconds is None else f'{seconds:.1f}'} |")
    lines.append("")
    if off:  # a plain LoRA run's four tuning stages: one line, not four "skipped" rows
        lines += [f"Not in this run (the spec turns them off): {_text(', '.join(off))}.", ""]
    if report.get("notes"):
        lines += ["## Notes", ""] + [f"- {_text(n)}" for n in report["notes"]] + [""]
    if report.get("models"):
        lines += ["## Models", ""] + [f"- {_code(m['id'])} ({_text(m['kind'])}): {_code(m['path'])}"
                                        for m in report["models"]] + [""]
    return "\n".join(lines)


def _chart_file(name: str, taken: dict[str, str]) -> str:
    """A series' SVG file name: `report-<name>.svg`, each character but an ASCII letter, digit, `_` or `-` made `-`
    (`sft.corpus_loss`: report-sft-corpus_loss.svg; a series named by a stage never names a path), a digest added
    when the name is long or another series already took it."""
    file = f"report-{_UNSAFE_FILE.sub('-', name)}.svg"
    if file in taken or len(file) > 120:
        file = f"{file[:100]}-{hashlib.sha256(name.encode('utf-8', 'surrogatepass')).hexdigest()[:12]}.svg"
    return file


def write_report(run_path: Path, report: dict[str, Any], series: dict[str, list]) -> None:
    """Write `report` (build_report's, unchanged) as report.json, report.md and report.html, and one SVG per
    series (the run's `Tally.series`) that moved."""
    from tt_host.reports.report_html import render_html

    charts: list[tuple[str, str | None]] = []
    svgs: dict[str, str] = {}
    warnings = _wrong_ways(series)
    for name in sorted(series, key=chart_order):
        warning, value = warnings[name], constant(series[name])
        if value is not None:
            charts.append((f"{name}: {value:.4g} at every one of its {len(series[name])} steps (not charted)", None))
            continue
        file = _chart_file(name, svgs)
        svgs[file] = svg_chart(name, series[name], warning)
        write_text_atomic(run_path / file, svgs[file])
        charts.append((name, file))
    write_json_atomic(run_path / REPORT_JSON, report)
    markdown = render_markdown(report, charts)
    write_text_atomic(run_path / REPORT_MD, markdown)
    write_text_atomic(run_path / "report.html", render_html(markdown, svgs, f"tt run {report['run_id']}"))
