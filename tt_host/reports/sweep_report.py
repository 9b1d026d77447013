"""A sweep's report: report.json, report.md and report.html in the sweep's folder, one chart per searched
setting (`score-<setting>.svg`: each trial's selection score against that setting's value).

Runs in the host's interpreter (tt_host.sweeps hands it the trials and the winner's held-out result). The
report says what the choice is worth: the winner's selection score and its held-out score, each with the
number of prompts behind it, and the optimism (selection minus held-out), so a gate or a reader does not take
the best of several trials' scores for what the chosen configuration will do on new prompts.
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any, Optional

from tt_host.fsutil import write_json_atomic, write_text_atomic
from tt_host.reports.charts import svg_chart
from tt_host.reports.report_html import render_html


def _value(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else html.escape(str(value))


def chart_points(trials: list[dict[str, Any]], key: str) -> tuple[list[list[float]], str]:
    """(x, score) per scored trial, and the x label; a setting of text choices is drawn at each choice's place
    in sorted order (the label names them)."""
    scored = [t for t in trials if t.get("selection_score") is not None and key in t["params"]]
    values = [t["params"][key] for t in scored]
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return sorted([[float(v), float(t["selection_score"])] for v, t in zip(values, scored)]), key
    order = sorted({str(v) for v in values})
    return (sorted([[float(order.index(str(v))), float(t["selection_score"])] for v, t in zip(values, scored)]),
            f"{key} ({', '.join(f'{i}={c}' for i, c in enumerate(order))})")


def optimism(selection: Optional[float], held_out: Optional[float]) -> Optional[float]:
    return selection - held_out if selection is not None and held_out is not None else None


def build_sweep_report(spec_name: str, objective: str, sampler: str, selection_count: int, held_out_count: int,
                       trials: list[dict[str, Any]], winner: Optional[dict[str, Any]] = None,
                       final: Optional[Any] = None) -> dict[str, Any]:
    """Every key of a sweep's report.json. `winner`: the chosen trial's row; `final`: its held-out run
    (tt_host.sweeps.trial.Scored), when it ran."""
    chosen = None
    if winner is not None and final is not None:
        chosen = {**winner, "run_dir": str(final.outcome.run_dir), "trial_run_dir": winner["run_dir"],
                  "model_id": final.model_id, "held_out_score": final.score, "held_out_count": final.count}
    return {"spec_name": spec_name, "objective": objective, "sampler": sampler, "selection_count": selection_count,
            "held_out_count": held_out_count, "trials": trials, "winner": chosen,
            "optimism": optimism(winner["selection_score"], final.score) if chosen else None}


def render_markdown(report: dict[str, Any], charts: list[tuple[str, str]]) -> str:
    objective, winner = report["objective"], report.get("winner")
    lines = [f"# Sweep {html.escape(report['spec_name'])}", "",
             f"- objective: `{objective}` over {report['selection_count']} selection prompts (carved from the "
             f"training examples); held-out set: {report['held_out_count']} prompts, scored once, for the winner",
             f"- sampler: {report['sampler']}, {len(report['trials'])} trials", ""]
    if winner is not None:
        lines += ["## Winner", "",
                  f"- trial {winner['number']}: "
                  + ", ".join(f"`{k}` {_value(v)}" for k, v in sorted(winner["params"].items())),
                  f"- selection {objective}: {_value(winner['selection_score'])} "
                  f"({winner['selection_count']} prompts)",
                  f"- held-out {objective}: {_value(winner['held_out_score'])} ({winner['held_out_count']} prompts), "
                  "trained again on every training example",
                  f"- **optimism (selection minus held-out): {_value(report['optimism'])}**",
                  f"- run: `{winner['run_dir']}`; model `{winner['model_id']}`", ""]
    keys = sorted({k for t in report["trials"] for k in t["params"]})
    lines += ["## Trials", "", "| trial | state | " + " | ".join(keys) + f" | selection {objective} |",
              "|" + " --- |" * (len(keys) + 3)]
    for t in report["trials"]:
        score = "" if t["selection_score"] is None else _value(t["selection_score"])
        lines.append(f"| {t['number']} | {t['state']} | "
                     + " | ".join(_value(t["params"].get(k, "")) for k in keys) + f" | {score} |")
    lines.append("")
    if charts:
        lines += ["## Selection score against each setting", ""]
        lines += [f"![{name}]({file})" for name, file in charts] + [""]
    return "\n".join(lines)


def write_sweep_report(folder: Path, report: dict[str, Any]) -> None:
    charts, svgs = [], {}
    for key in sorted({k for t in report["trials"] for k in t["params"]}):
        points, label = chart_points(report["trials"], key)
        file = f"score-{re.sub(r'[^A-Za-z0-9_-]+', '-', key)}.svg"
        svgs[file] = svg_chart(f"selection {report['objective']}", points, x_label=label, markers=True)
        write_text_atomic(folder / file, svgs[file])
        charts.append((key, file))
    write_json_atomic(folder / "report.json", report)
    markdown = render_markdown(report, charts)
    write_text_atomic(folder / "report.md", markdown)
    write_text_atomic(folder / "report.html", render_html(markdown, svgs, f"tt sweep {report['spec_name']}"))
