"""`tt engines list|prepare|gc|new`: installed engine plugins, their hashed environments, and new plugin scaffolds."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from tt_host.cli.common import JsonOption, console, emit_json, err, fail, load_plugins

app = typer.Typer(no_args_is_help=True, help="Installed engines and their environments.")


def engine_rows() -> tuple[list[dict], list[dict]]:
    from tt_host import envs

    plugins = load_plugins()
    rows = []
    for name, engine in sorted(plugins.engines.items()):
        row = {"name": name, "distribution": engine.distribution, "version": engine.distribution_version,
               "runtime_project": str(engine.runtime_project), "description": engine.description,
               "host_api": engine.host_api, "env_key": None, "env_path": None, "env_ready": False, "error": None}
        try:
            path = envs.env_dir(engine)
            row.update(env_key=envs.env_key(engine), env_path=str(path), env_ready=envs.is_ready(path))
        except envs.EnvBuildError as exc:
            row["error"] = str(exc)
        rows.append(row)
    problems = [{"plugin": p.plugin, "engine": p.engine, "distribution": p.distribution, "version": p.version,
                 "error": p.error} for p in plugins.problems]
    return rows, problems


@app.command("list")
def list_engines(json_mode: bool = JsonOption) -> None:
    """Every engine: distribution, runtime project, environment key and readiness, load errors."""
    rows, problems = engine_rows()
    if json_mode:
        emit_json({"engines": rows, "problems": problems})
        return
    from rich.table import Table

    table = Table("engine", "distribution", "runtime project", "env key", "env ready")
    for row in rows:
        table.add_row(row["name"], f"{row['distribution']} {row['version']}", row["runtime_project"],
                      row["env_key"] or f"[red]{row['error']}[/]", "yes" if row["env_ready"] else "no")
    console.print(table)
    for problem in problems:
        err.print(f"[red]plugin {problem['plugin']!r} ({problem['distribution']} {problem['version']}) "
                  f"is not usable:[/] {problem['error']}")


@app.command()
def prepare(
    name: str = typer.Argument(..., help="Engine name (see `tt engines list`)."),
    offline: bool = typer.Option(False, "--offline", help="Use only uv's cache; no network."),
    json_mode: bool = JsonOption,
) -> None:
    """Build an engine's environment ahead of time."""
    from tt_host import envs
    from tt_host.plugins import UnknownEngineError

    try:
        engine = load_plugins().engine(name)
    except UnknownEngineError as exc:
        fail(str(exc), json_mode=json_mode)
    log = (lambda line: None) if json_mode else (lambda line: err.print(line, markup=False))
    try:
        info = envs.ensure_env(engine, offline=offline or None, log=log)
    except envs.EnvBuildError as exc:
        fail(str(exc), code=1, json_mode=json_mode)
    if json_mode:
        emit_json({"engine": info.engine, "key": info.key, "path": str(info.path), "python": str(info.python),
                   "built": info.built, "seconds": round(info.seconds, 3)})
    else:
        verb = "built" if info.built else "already ready"
        console.print(f"{name}: environment {verb} at {info.path} ({info.seconds:.1f}s)")


@app.command()
def gc(json_mode: bool = JsonOption) -> None:
    """Remove environments that no installed engine uses."""
    from tt_host import envs

    removed = envs.gc(load_plugins().engines.values())
    if json_mode:
        emit_json({"removed": [str(p) for p in removed]})
    else:
        for path in removed:
            console.print(f"removed {path}")
        console.print(f"{len(removed)} environment(s) removed")


@app.command()
def new(
    name: str = typer.Argument(..., help="Engine name: lowercase letters, digits, underscores (e.g. demo)."),
    directory: Optional[Path] = typer.Argument(None, help="Folder to create (default ./tt-engine-NAME); must not exist."),
    lock: bool = typer.Option(True, "--lock/--no-lock", help="Run `uv lock` for the runtime project (needs the network)."),
    json_mode: bool = JsonOption,
) -> None:
    """Scaffold a working engine plugin package (see docs/plugins.md)."""
    from tt_host import scaffold

    try:
        made = scaffold.create(name, directory, lock=lock)
    except scaffold.ScaffoldError as exc:
        fail(str(exc), json_mode=json_mode)
    if json_mode:
        emit_json({"ok": True, "engine": made.name, "path": str(made.path), "package": made.package,
                   "distribution": made.distribution, "files": made.files, "locked": made.locked,
                   "lock_error": made.lock_error, "lock_command": None if made.locked else made.lock_command})
        return
    console.print(f"[green]created[/] {made.distribution} (engine {made.name!r}) in {made.path}")
    for file in made.files:
        console.print(f"  {file}", markup=False)
    if made.locked:
        console.print("locked the runtime project: uv.lock")
    else:
        err.print(f"[yellow]uv.lock was not generated[/] ({made.lock_error}); tt needs it to build the engine "
                  f"environment. Run: {made.lock_command}")
    console.print(f"next:\n  pip install -e {made.path}   (in the environment where tt is installed)\n"
                  f"  tt engines list\n  tt engines prepare {made.name}\n  pytest {made.path}", markup=False)
