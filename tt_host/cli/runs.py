"""`tt runs list|report|get|events|compare`: runs, their reports, stage events and metrics side by side."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from tt_host.cli.common import (JsonOption, clean, console, emit_json, err, escape, fail, json_option, json_text,
                               os_errors_refused, show_table)
from tt_stagekit.contract import EXIT_INTERRUPTED

app = typer.Typer(no_args_is_help=True, help="Runs and their reports.")


@app.command("list")
def list_runs(
    root: Optional[Path] = typer.Argument(None, help="A spec folder (its .tuned-tensor/runs) or a folder of runs; "
                                          "without it, every run in the run index and under this folder."),
    here: bool = typer.Option(False, "--here", help="Only the runs under this folder (or ROOT), as before the "
                              "run index."),
    json_mode: bool = JsonOption,
) -> None:
    """List runs with engine, status and spec: every run tt started or resumed (the run index in $TT_HOME),
    wherever its folder; a moved or deleted folder is shown as missing."""
    from tt_host.errors import CorruptRecord
    from tt_host.runs import index
    from tt_host.runs.store import RunDir, find_runs

    with os_errors_refused(json_mode):
        found = [path.absolute() for path in find_runs(root or Path("."))]
        problems: list[str] = []  # corrupt run.json files and index records: named, never skipped silently
        recorded = [] if (here or root is not None) else index.entries(problems)
    rows, seen = [], set()
    for path in found + [Path(e["run_dir"]) for e in recorded if not e["missing"]]:
        if path in seen:
            continue
        seen.add(path)
        try:
            state = RunDir(path).load()
        except CorruptRecord as exc:  # named, never skipped silently
            problems.append(str(exc))
            continue
        except OSError as exc:
            problems.append(f"{path / 'run.json'}: cannot be read ({exc.strerror or exc}); check its permissions")
            continue
        rows.append({"run_dir": str(path), "id": state.get("id"), "engine": state.get("engine"),
                     "status": state.get("status"), "spec": state.get("spec_name"),
                     "created_at": state.get("created_at"), "updated_at": state.get("updated_at")})
    for entry in recorded:
        if entry["missing"] and Path(entry["run_dir"]) not in seen:
            rows.append({"run_dir": entry["run_dir"], "id": entry["id"], "engine": entry.get("engine"),
                         "status": "missing", "spec": None, "created_at": entry.get("created_at"),
                         "updated_at": entry.get("indexed_at")})
    if json_mode:
        emit_json({"runs": rows, **({"problems": problems} if problems else {})})
        return
    show_table(("run", "engine", "status", "spec", "updated"),
               [(row["run_dir"], row["engine"], row["status"], row["spec"], row["updated_at"]) for row in rows])
    for problem in problems:
        typer.echo(clean(f"tt: not listed: {problem}"), err=True)


@app.command()
def report(run: str = typer.Argument(..., help="Run directory or run id (or its unique prefix)."),
           json_mode: bool = JsonOption) -> None:
    """Show a run's report."""
    folder = _run_path(run, json_mode)
    path = folder / ("report.json" if json_mode else "report.md")
    with os_errors_refused(json_mode):
        found = path.is_file()
    if not found:
        fail(f"{path} not found; the run has not written its report yet (`tt runs get {run}`)", json_mode=json_mode)
    if json_mode:
        emit_json(json.loads(path.read_text(encoding="utf-8")))
    elif not console.is_terminal:  # the Markdown itself to a pipe, as plain text: nothing folded, no HTML entity
        import html

        typer.echo(clean(html.unescape(path.read_text(encoding="utf-8"))), nl=False)
    else:  # drawn on the terminal, long lines wrapped to its width (tt's console does not wrap by default)
        from rich.markdown import Markdown

        console.print(Markdown(path.read_text(encoding="utf-8")), soft_wrap=False)


def _run_path(reference: str, json_mode: bool) -> Path:
    from tt_host.runs.inspect import resolve_run

    with os_errors_refused(json_mode):
        return resolve_run(reference)


def _cell(value) -> str:
    if value is None:
        return "—"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


@app.command()
def get(run: str = typer.Argument(..., help="Run directory or run id (or its unique prefix)."),
        json_mode: bool = JsonOption) -> None:
    """A run's status, stages, metrics and models."""
    from tt_host.runs.inspect import summary

    info = summary(_run_path(run, json_mode))
    if json_mode:
        emit_json(info)
        return
    live = " (live)" if info["live"] else ""
    console.print(f"run {info['id']} engine {info['engine']}: {info['status']}{live}; spec {info['spec']}",
                  markup=False)
    console.print(f"  {info['run_dir']}", markup=False)
    if info.get("error"):
        console.print(f"  error: {info['error']}", markup=False)
    show_table(("stage", "state", "seconds"),
               [(name, str(stage.get("state")), _cell(stage.get("seconds"))) for name, stage in info["stages"].items()])
    if info["metrics"]:
        show_table(("metric", "value"), [(name, _cell(value)) for name, value in info["metrics"].items()])
    for model in info["models"]:
        console.print(f"model {model['id']} ({model['kind']})", markup=False)


@app.command()
def events(run: str = typer.Argument(..., help="Run directory or run id."),
           follow: bool = typer.Option(False, "--follow", "-f", help="Keep streaming while the run is live; "
                                       "stop when it ends."),
           json_mode: bool = json_option("One JSON event per line (with its stage).")) -> None:
    """The stage events from a run's logs (progress, logs, artifacts), in stage order."""
    import sys

    from tt_host.runs.inspect import describe, events as stream

    path = _run_path(run, json_mode)
    try:
        for event in stream(path, follow=follow):
            if json_mode:
                sys.stdout.write(json_text(json.dumps(event, ensure_ascii=False, default=str)) + "\n")
            else:
                sys.stdout.write(clean(f"{event['stage']:<12} {describe(event)}") + "\n")
            sys.stdout.flush()
    except KeyboardInterrupt:
        raise typer.Exit(EXIT_INTERRUPTED)


@app.command()
def compare(first: str = typer.Argument(..., help="Run directory or id."),
            second: str = typer.Argument(..., help="Run directory or id."),
            json_mode: bool = JsonOption) -> None:
    """Two runs' metrics side by side (with the difference second - first), then re-scored on the held-out and
    general-regression prompts both evaluated, with a warning for each prompt one trained on and the other
    evaluated."""
    from tt_host.runs.inspect import compare as side_by_side

    data = side_by_side([_run_path(first, json_mode), _run_path(second, json_mode)])
    if json_mode:
        emit_json(data)
        return
    # Plain columns, never truncated (run ids are long and rich would fold them in a narrow terminal).
    left, right = (r["id"] for r in data["runs"])
    rows = [("metric", left, right, "difference")]
    for name, (a, b) in data["metrics"].items():
        numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (a, b))
        rows.append((name, _cell(a), _cell(b), _cell(b - a) if numeric else ""))
    _columns(rows)
    for key, title in (("held_out", "held-out prompts"), ("general", "general-regression prompts")):
        if key not in data:
            continue
        part = data[key]
        typer.echo(clean(f"\n{title}: {part['shared']} shared, {part['only_first']} only in {left}, "
                   f"{part['only_second']} only in {right}; on the shared prompts:"))
        _columns([("metric", left, right, "difference")] + [
            (name, _cell(a), _cell(b), _cell(b - a) if all(isinstance(v, (int, float)) for v in (a, b)) else "")
            for name, (a, b) in part["metrics"].items()])
    for warning in data.get("warnings", []):
        err.print(f"[yellow]warning:[/] {escape(warning['warning'])}")


def _columns(rows: list[tuple[str, ...]]) -> None:
    """Plain columns, never truncated (run ids are long and rich would fold them in a narrow terminal)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        typer.echo(clean("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()))
