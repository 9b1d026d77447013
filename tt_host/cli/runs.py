"""`tt runs list|report`: runs under a folder and their reports."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from tt_host.cli.common import JsonOption, console, emit_json, fail

app = typer.Typer(no_args_is_help=True, help="Runs and their reports.")


@app.command("list")
def list_runs(
    root: Path = typer.Argument(Path("."), help="A spec folder (its .tuned-tensor/runs) or a folder of runs."),
    json_mode: bool = JsonOption,
) -> None:
    """List runs with engine, status and spec."""
    from tt_host.runs.store import RunDir, find_runs

    rows = []
    for path in find_runs(root):
        try:
            state = RunDir(path).load()
        except (OSError, json.JSONDecodeError):
            continue
        rows.append({"run_dir": str(path.absolute()), "id": state.get("id"), "engine": state.get("engine"),
                     "status": state.get("status"), "spec": state.get("spec_name"),
                     "created_at": state.get("created_at"), "updated_at": state.get("updated_at")})
    if json_mode:
        emit_json({"runs": rows})
        return
    from rich.table import Table

    table = Table("run", "engine", "status", "spec", "updated")
    for row in rows:
        table.add_row(row["run_dir"], row["engine"], row["status"], row["spec"], row["updated_at"])
    console.print(table)


@app.command()
def report(run: Path = typer.Argument(..., help="Run directory."), json_mode: bool = JsonOption) -> None:
    """Show a run's report."""
    path = run / ("report.json" if json_mode else "report.md")
    if not path.is_file():
        fail(f"{path} not found; is {run} a run directory? (`tt runs list`)")
    if json_mode:
        emit_json(json.loads(path.read_text(encoding="utf-8")))
    else:
        from rich.markdown import Markdown

        console.print(Markdown(path.read_text(encoding="utf-8")))
