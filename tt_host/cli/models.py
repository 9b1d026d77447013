"""`tt models list|verify`: registered, verified artifacts."""

from __future__ import annotations

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
