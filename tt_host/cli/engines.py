"""`tt engines list|prepare|gc|new|lock|install|uninstall`: engine plugins, their environments, scaffolds, shipped locks."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from tt_host.cli.common import JsonOption, console, emit_json, err, fail, load_plugins

app = typer.Typer(no_args_is_help=True, help="Installed engines and their environments.")


def engine_rows() -> tuple[list[dict], list[dict]]:
    from tt_host.engines import envs

    plugins = load_plugins()
    rows = []
    for name, engine in sorted(plugins.engines.items()):
        row = {"name": name, "distribution": engine.distribution, "version": engine.distribution_version,
               "runtime_project": str(engine.runtime_project), "runtime_lock": str(engine.runtime_lock),
               "runtime_source": None, "description": engine.description,
               "host_api": engine.host_api, "env_key": None, "env_path": None, "env_ready": False, "error": None}
        try:
            row["runtime_source"] = str(envs.runtime_source(engine)[1])
            path = envs.env_dir(engine)
            row.update(env_key=envs.env_key(engine), env_path=str(path), env_ready=envs.is_ready(path))
            row["torch"] = envs.torch_record(engine, path) if row["env_ready"] else None
        except envs.EnvBuildError as exc:
            row["error"] = str(exc)
        rows.append(row)
    problems = [{"plugin": p.plugin, "engine": p.engine, "distribution": p.distribution, "version": p.version,
                 "error": p.error} for p in plugins.problems]
    return rows, problems


@app.command("list")
def list_engines(json_mode: bool = JsonOption) -> None:
    """Every engine: distribution, runtime source (project or shipped lock), environment key and readiness, load errors."""
    rows, problems = engine_rows()
    if json_mode:
        emit_json({"engines": rows, "problems": problems})
        return
    from rich.table import Table

    from tt_host.engines.torch_build import short

    table = Table("engine", "distribution", "runtime (project or shipped lock)", "env key", "env ready", "torch")
    for row in rows:
        table.add_row(row["name"], f"{row['distribution']} {row['version']}", row["runtime_source"] or "-",
                      row["env_key"] or f"[red]{row['error']}[/]", "yes" if row["env_ready"] else "no",
                      short(row.get("torch")) if row["env_ready"] else "-")
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
    from tt_host.engines import envs

    from tt_host.engines.torch_build import summary

    engine = load_plugins().engine(name)
    if json_mode and not err.is_terminal:  # quiet: one JSON object at the end
        info = envs.ensure_env(engine, offline=offline or None)
    else:  # packages and bytes as uv fetches them (tt_host.engines.build_progress); --json: stdout's JSON alone
        from tt_host.engines.build_progress import BuildDisplay

        with BuildDisplay(err, f"preparing the {name} environment") as show:
            info = envs.ensure_env(engine, offline=offline or None, progress=show)
    torch = envs.torch_record(engine, info.path)
    if json_mode:
        emit_json({"engine": info.engine, "key": info.key, "path": str(info.path), "python": str(info.python),
                   "built": info.built, "seconds": round(info.seconds, 3), "torch": torch})
    else:
        verb = "built" if info.built else "already ready"
        console.print(f"{name}: environment {verb} at {info.path} ({info.seconds:.1f}s); {summary(torch)}",
                      markup=False, soft_wrap=True)


@app.command()
def gc(
    dry_run: Optional[bool] = typer.Option(
        None, "--dry-run/--delete",
        help="Only show what would be deleted (the default when stdout is not a terminal), or delete it."),
    json_mode: bool = JsonOption,
) -> None:
    """Remove environments tt built that no installed engine uses and no running tt holds."""
    import sys

    from tt_host.engines import envs

    if dry_run is None:
        dry_run = not sys.stdout.isatty()
    result = envs.gc(load_plugins().engines.values(), dry_run=dry_run)
    freed = sum(size for _, size in result.removed)
    if json_mode:
        emit_json({"dry_run": dry_run, "removed": [] if dry_run else [str(p) for p, _ in result.removed],
                   "would_remove": [str(p) for p, _ in result.removed] if dry_run else [],
                   "freed_bytes": 0 if dry_run else freed, "bytes": freed,
                   "kept": [{"path": str(p), "reason": why} for p, why in result.kept]})
        return
    verb = "would remove" if dry_run else "removed"
    for path, size in result.removed:
        console.print(f"{verb} {path} ({_size(size)})", markup=False, soft_wrap=True)
    for path, why in result.kept:
        err.print(f"kept {path}: {why}", markup=False, soft_wrap=True)
    if dry_run:
        console.print(f"dry run: {len(result.removed)} environment(s), {_size(freed)} would be freed; "
                      "run `tt engines gc --delete` to delete them", markup=False, soft_wrap=True)
    else:
        console.print(f"{len(result.removed)} environment(s) removed, {_size(freed)} freed", markup=False)


def _size(count: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count} B"


@app.command()
def new(
    name: str = typer.Argument(..., help="Engine name: lowercase letters, digits, underscores (e.g. demo)."),
    directory: Optional[Path] = typer.Argument(None, help="Folder to create (default ./tt-engine-NAME); must not exist."),
    lock: bool = typer.Option(True, "--lock/--no-lock", help="Run `uv lock` for the runtime project (needs the network)."),
    json_mode: bool = JsonOption,
) -> None:
    """Scaffold a working engine plugin package (see docs/plugins.md)."""
    from tt_host.engines import scaffold

    made = scaffold.create(name, directory, lock=lock)
    if json_mode:
        emit_json({"ok": True, "engine": made.name, "path": str(made.path), "package": made.package,
                   "distribution": made.distribution, "files": made.files, "locked": made.locked,
                   "lock_error": made.lock_error, "lock_command": None if made.locked else made.lock_command})
        return
    console.print(f"[green]created[/] {made.distribution} (engine {made.name!r}) in {made.path}")
    for file in made.files:
        console.print(f"  {file}", markup=False)
    if made.locked:
        console.print(f"locked the runtime project: uv.lock, {made.package}/pylock.runtime.toml")
    else:
        err.print(f"[yellow]the locks were not generated[/] ({made.lock_error}); tt needs them to build the engine "
                  f"environment. Run: {made.lock_command}")
    console.print(f"next:\n  tt engines install -e {made.path}\n"
                  f"  tt engines list\n  tt engines prepare {made.name}\n  pytest {made.path}", markup=False)


@app.command()
def lock(
    names: List[str] = typer.Argument(None, help="Engines to lock (default: every engine whose source project is here)."),
    check: bool = typer.Option(False, "--check", help="Write nothing; exit 1 when a shipped lock is not current."),
    json_mode: bool = JsonOption,
) -> None:
    """Write each engine's shipped runtime lock (pylock.runtime.toml) from its project's uv.lock."""
    from tt_host.engines import envs
    from tt_host.engines import runtime_lock

    plugins = load_plugins()
    engines = [plugins.engine(n) for n in names] if names else list(plugins.engines.values())
    rows, stale = [], []
    for engine in sorted(engines, key=lambda e: e.name):
        try:
            kind, project = envs.runtime_source(engine)
        except envs.EnvBuildError:
            kind = "none"
        if kind != "project" or engine.runtime_lock is None:
            if names:
                fail(f"engine {engine.name!r}: `tt engines lock` needs its source project (pyproject.toml + uv.lock; "
                     "install it with `tt engines install --editable DIR`) and a runtime_lock path in its Engine "
                     "record", json_mode=json_mode)
            continue
        target = Path(engine.runtime_lock)
        if check:
            current = runtime_lock.is_current(project, engine.sync_groups, target)
        else:
            runtime_lock.export(project, engine.sync_groups, target)
            current = True
        rows.append({"engine": engine.name, "lock": str(target), "current": current})
        if not current:
            stale.append(engine.name)
    if json_mode:
        from tt_host.cli.jsonshapes import verdict

        emit_json({**verdict([f"{name}: the runtime lock is stale" for name in stale]), "locks": rows})
    else:
        for row in rows:
            state = "current" if row["current"] else "[red]stale[/]"
            console.print(f"{row['engine']}: {row['lock']} {state if check else 'written'}")
        if stale:
            err.print(f"[red]stale runtime lock(s): {', '.join(stale)}[/]; run `tt engines lock {' '.join(stale)}` "
                      "(or scripts/export-runtime-locks) and commit the result")
    if stale:
        raise typer.Exit(1)


@app.command()
def install(
    packages: List[str] = typer.Argument(..., help="Engine NAME (tt-engine-NAME), PATH (project folder or .whl), or requirement."),
    editable: bool = typer.Option(False, "--editable", "-e", help="Install a project folder editable (plugin development)."),
    upgrade: bool = typer.Option(False, "--upgrade", "-U", help="Upgrade packages that are already installed."),
    json_mode: bool = JsonOption,
) -> None:
    """Install engine or observer plugins into tt's own environment (uv tool, pipx or venv, detected)."""
    from tt_host.engines import installer

    requirements = [arg for package in packages for arg in installer.requirement(package, editable)]
    _run_installer(installer.detect().install(requirements, upgrade), "install", json_mode)


@app.command()
def uninstall(
    name: str = typer.Argument(..., help="Engine name (see `tt engines list`) or plugin distribution name."),
    json_mode: bool = JsonOption,
) -> None:
    """Remove an engine or observer plugin from tt's environment (its built environments stay until `tt engines gc`)."""
    from tt_host.engines import installer

    engine = load_plugins().engines.get(name)
    distribution = engine.distribution if engine is not None and engine.distribution else name
    installer.check_uninstallable(distribution)
    _run_installer(installer.detect().uninstall(distribution), "uninstall", json_mode)


def _run_installer(command: list[str], verb: str, json_mode: bool) -> None:
    from tt_host.engines import installer

    lines: list[str] = []
    log = lines.append if json_mode else (lambda line: err.print(line, markup=False))
    if not json_mode:
        err.print(f"running: {' '.join(command)}", markup=False)
    code = installer.run(command, log)
    if code != 0:
        fail(f"{verb} failed ({command[0]} exit {code}): " + " / ".join(lines[-3:]) +
             "; check the name, path or network, then retry", code=1, json_mode=json_mode)
    if json_mode:
        emit_json({"ok": True, "installer": installer.detect().kind, "command": command})
    else:
        console.print(f"{verb}ed with {installer.detect().kind}: see `tt engines list`")
