"""`tt models list|verify|export`: registered, verified artifacts (export logic in tt_host.export)."""

from __future__ import annotations

from pathlib import Path

import typer

from tt_host.cli.common import JsonOption, console, emit_json, err, fail

app = typer.Typer(no_args_is_help=True, help="Registered models (adapters, foundation models).")


@app.command("list")
def list_models(json_mode: bool = JsonOption) -> None:
    """Every registered model."""
    from tt_host.models import list_models as entries

    models = entries()
    if json_mode:
        emit_json({"models": models})
        return
    from rich.table import Table

    table = Table("id", "kind", "engine", "path")
    for model in models:
        table.add_row(model["id"], model["kind"], model["engine"], model["path"])
    console.print(table)


@app.command()
def verify(model_id: str = typer.Argument(..., help="Model id (see `tt models list`)."), json_mode: bool = JsonOption) -> None:
    """Check every file of a model against its manifest; exit 1 naming what changed."""
    from tt_host.models import verify_model

    try:
        entry, problems = verify_model(model_id)
    except LookupError as exc:
        fail(str(exc), json_mode=json_mode)
    if json_mode:
        emit_json({"id": model_id, "ok": not problems, "path": entry["path"],
                   "problems": [{"file": p.file, "reason": p.reason} for p in problems]})
    elif problems:
        for problem in problems:
            err.print(f"[red]{model_id}: {problem}[/]")
    else:
        console.print(f"[green]{model_id}: verified[/] ({entry['path']})")
    raise typer.Exit(1 if problems else 0)


@app.command()
def export(
    model: str = typer.Argument(..., help="Registered model id, run directory or model folder."),
    out: Path = typer.Argument(..., help="New folder to write (must not exist)."),
    fmt: str = typer.Option("hf", "--format", help="Output format: hf (Hugging Face folder)."),
    merged: bool = typer.Option(False, "--merged", help="Adapter models: merge LoRA into full-precision base weights."),
    offline: bool = typer.Option(False, "--offline", help="Build engine environments from uv's cache only."),
    json_mode: bool = JsonOption,
) -> None:
    """Write MODEL as a folder transformers loads: a foundation model in full, an adapter (optionally merged)."""
    from tt_host.export import ExportError, export_model
    from tt_host.modelref import ModelRefError, resolve

    log = (lambda line: None) if json_mode else (lambda line: err.print(line, markup=False))
    try:
        summary = export_model(resolve(model), out, fmt=fmt, merged=merged, offline=offline or None, log=log)
    except (ExportError, ModelRefError) as exc:
        fail(str(exc), code=exc.exit_code, json_mode=json_mode)
    if json_mode:
        emit_json(summary)
    else:
        console.print(f"[green]exported[/] {summary['model']} ({summary['kind']}) to {summary['path']}")
