"""`tt`: the root command, `run`, `validate`, `doctor` and `init` (`tt pipeline` is tt_host.cli.pipeline).

Heavy imports (pydantic, plugins) happen inside commands so `tt --help` stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.text import Text

from tt_host import __version__
from tt_host.cli import data as data_cli
from tt_host.cli import engines as engines_cli
from tt_host.cli import init as init_cli
from tt_host.cli import models as models_cli
from tt_host.cli import pipeline as pipeline_cli
from tt_host.cli import runs as runs_cli
from tt_host.cli import chat as chat_cli
from tt_host.cli import serve as serve_cli
from tt_host.cli import status as status_cli
from tt_host.cli import sweep as sweep_cli
from tt_host.cli.common import JsonOption, TTGroup, console, emit_json, escape, fail, load_plugins, show_table
from tt_host.cli.running import (ConfigOption, QuietOption, SetOption, SPEC_DEFAULT, SpecArgument, VerboseOption,
                                 print_errors, print_graders, print_warnings, run_spec)
from tt_host.terminal import clean

app = typer.Typer(
    name="tt", no_args_is_help=True, add_completion=False, cls=TTGroup,
    help="tt: turn a behavior spec (tunedtensor.json) into a trained, evaluated model on your own hardware.",
)
app.add_typer(engines_cli.app, name="engines")
app.add_typer(runs_cli.app, name="runs")
app.add_typer(models_cli.app, name="models")
app.add_typer(pipeline_cli.app, name="pipeline")
app.add_typer(data_cli.app, name="data")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"tt {__version__}")
        raise typer.Exit()


@app.callback()
def root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version.")) -> None:
    """tt: a local training runtime for behavior specs."""


@app.command()
def validate(spec: Path = SpecArgument, config: Optional[Path] = ConfigOption, overrides: list[str] = SetOption,
             json_mode: bool = JsonOption) -> None:
    """Validate a spec and show the compiled system message. Exit 2 when invalid.

    With `--set KEY=VALUE`, the spec is checked as `tt run --set` would read it."""
    from tt_host.spec.loading import load_spec

    loaded = load_spec(spec, load_plugins(), config=config, overrides=tuple(overrides))
    print_warnings(loaded)
    if not loaded.valid:
        print_errors(loaded, json_mode)
        raise typer.Exit(2)
    compiled = loaded.compiled
    plan = [clean(line) for line in loaded.engine.plan_notes(loaded.spec)] if loaded.engine.plan_notes else []
    if json_mode:
        emit_json({
            "ok": True, "valid": True, "engine": loaded.engine_name, "spec_path": str(loaded.path), "errors": [],
            "warnings": [w.as_dict() for w in loaded.warnings],
            "system_message": compiled.system_message, "system_message_sha256": compiled.system_message_sha256,
            "train_count": len(compiled.train_rows), "eval_count": len(compiled.eval_rows),
            "held_out": [row["messages"][1]["content"] for row in compiled.eval_rows],
            "split_salt": compiled.split.salt, "overrides": loaded.overrides,
            # Node 0.13's keys (docs/json.md)
            "input_path": str(loaded.path), "config_path": str(loaded.config) if loaded.config else None,
            "behavior_spec_id": loaded.spec_id, "base_model": getattr(loaded.spec, "base_model", None),
            "dry_run": loaded.dry_run,
            "graders": loaded.grader_check.described(), "graders_derived_by": loaded.graders.derived_by,
            "plan": plan,
        })
        return
    console.print(f"[green]valid[/] {escape(str(loaded.path))} (engine {loaded.engine_name}): "
                  f"{len(compiled.train_rows)} training and {len(compiled.eval_rows)} held-out examples")
    if loaded.overrides:
        console.print("With " + " ".join(f"--set {clean(o)}" for o in loaded.overrides), markup=False)
    if compiled.eval_rows:
        console.print(f"Held out (split salt {compiled.split.salt!r}):", markup=False)
        for row in compiled.eval_rows:
            first = row["messages"][1]["content"].splitlines()[0]
            console.print(f"- {first[:100]}{'…' if first != row['messages'][1]['content'] or len(first) > 100 else ''}",
                          markup=False)
    print_graders(loaded.grader_check)
    if plan:
        console.print("Plan:", markup=False)
        for line in plan:
            console.print(f"- {line}", markup=False)
    console.print("System message:")
    console.print(compiled.system_message, markup=False)
    console.print(f"sha256 {compiled.system_message_sha256}")


@app.command()
def run(
    spec: Path = SpecArgument,
    resume: Optional[Path] = typer.Option(None, "--resume", help="Run directory to start or continue."),
    device: Optional[str] = typer.Option(None, "--device", help="auto, cpu, cuda or mps (overrides the spec)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print, per stage, whether it would run, be reused or be "
                                 "refused and why; create nothing (exit 2 when it would refuse)."),
    config: Optional[Path] = ConfigOption,
    no_wait: bool = typer.Option(False, "--no-wait", help="Refuse at once when stage processes of a tt that "
                                 "died still hold the run, instead of waiting (up to the stage grace period) "
                                 "for them to save and exit."),
    verbose: bool = VerboseOption,
    quiet: bool = QuietOption,
    overrides: list[str] = SetOption,
    json_mode: bool = JsonOption,
) -> None:
    """Train, evaluate and report a spec with its engine."""
    if verbose and quiet:
        fail("give --verbose or --quiet, not both", json_mode=json_mode)
    run_spec(spec, resume, device, json_mode, dry_run, config=config, wait=not no_wait, verbose=verbose, quiet=quiet,
             overrides=tuple(overrides))


def _config_beside(spec: Optional[Path]) -> Optional[str]:
    from tt_host.spec.runner_config import find

    found = find(spec.expanduser().absolute(), None) if spec is not None else None
    return str(found) if found is not None else None


@app.command()
def doctor(
    spec: Optional[Path] = typer.Argument(None, help="Spec to check with its engine (default: ./tunedtensor.json "
                                          "when it exists)."),
    device: Optional[str] = typer.Option(None, "--device", help="Device to check for."),
    resume: Optional[Path] = typer.Option(None, "--resume", help="Run directory the run will use (default: the "
                                          "spec's .tuned-tensor/runs); free space is measured there."),
    json_mode: bool = JsonOption,
) -> None:
    """Check python, uv, disk, writable folders, plugins, and a spec's engine prerequisites.
    Exit 1 when a check fails; exit 2, checking nothing, when the spec file cannot be read as JSON."""
    from tt_host.checks.doctor import run_checks
    from tt_host.spec.loading import read_json

    if spec is None and SPEC_DEFAULT.is_file():
        spec = SPEC_DEFAULT
    if spec is not None:
        raw, errors = read_json(spec.expanduser().absolute())
        if raw is None:  # a missing file, a folder, invalid JSON: bad input, not a failed check
            fail("; ".join(e.msg for e in errors), json_mode=json_mode)
    checks = run_checks(spec, device, load_plugins(), resume)
    failed = any(c.status == "fail" for c in checks)
    if json_mode:
        from tt_host.cli.jsonshapes import verdict

        emit_json({**verdict([f"{c.name}: {c.detail}" for c in checks if c.status == "fail"]),
                   "checks": [c.__dict__ for c in checks], "config_path": _config_beside(spec)})
    else:
        styles = {"ok": "green", "warn": "yellow", "fail": "red"}
        show_table(("check", "status", "detail", "next step"),
                   [(c.name, Text(c.status, style=styles[c.status]), c.detail, c.hint) for c in checks])
    raise typer.Exit(1 if failed else 0)


app.command("init")(init_cli.init)
app.command("serve")(serve_cli.serve)
app.command("chat")(chat_cli.chat)
app.command("info")(status_cli.info)
app.command("status")(status_cli.status)
app.command("sweep")(sweep_cli.sweep)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
