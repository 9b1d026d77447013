"""Running a spec from the command line, shared by `tt run` and `tt pipeline run`: load it, print its warnings or
errors, preview (`--dry-run`) or execute it, print the outcome.

`only` (a pipeline document's stages, tt_host.pipelines.steps) limits a run to some stages; `after` is told the
finished outcome while the run is still locked (the pipeline writes each step's evaluation file there) and returns
extra fields for the `--json` object.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional

import typer
from rich.text import Text

from tt_host.cli.common import console, emit_json, err, escape, fail, load_plugins, show_table
from tt_stagekit.contract import EXIT_INTERRUPTED

DEVICES = ("auto", "cpu", "cuda", "mps")
SPEC_DEFAULT = Path("tunedtensor.json")
SpecArgument = typer.Argument(SPEC_DEFAULT, help="Path to the spec (default: ./tunedtensor.json).")
ConfigOption = typer.Option(None, "--config", help="A Node CLI local-runner.json to apply (default: the one beside "
                            "the spec, when there is one); each key takes effect or is refused (docs/migrating.md).")


VerboseOption = typer.Option(False, "--verbose", help="Also print every line the stages write (stderr).")
QuietOption = typer.Option(False, "--quiet", help="Print no progress on stderr (warnings and errors still).")
SetOption = typer.Option([], "--set", metavar="KEY=VALUE", help="Override a spec field for this command (repeatable): "
                         "KEY dotted (hyperparameters.learning_rate, examples.0.output), VALUE read as JSON when "
                         "it parses, else a string. A run records it and fingerprints it like the spec.")


def print_warnings(loaded) -> None:
    """One line on stderr per legacy key that was mapped (the --json output lists them too)."""
    for warning in loaded.warnings:
        err.print(f"[yellow]warning:[/] {escape(warning.msg)}")


def _unreadable(loaded) -> Optional[str]:
    """The message when the spec file itself could not be read (missing, a folder): no field to fix."""
    errors = loaded.errors
    if len(errors) == 1 and errors[0].loc == "(file)" and ": cannot read: " in errors[0].msg:
        return errors[0].msg
    return None


def print_errors(loaded, json_mode: bool) -> None:
    unreadable = _unreadable(loaded)
    if json_mode:
        from tt_host.cli.jsonshapes import failure

        first = loaded.errors[0] if loaded.errors else None
        message = unreadable or f"{loaded.path}: invalid spec" + (f": {first.loc}: {first.msg}" if first else "")
        graders = loaded.grader_check.described() if loaded.grader_check is not None else None
        emit_json(failure(message, 2, valid=False, engine=loaded.engine_name, spec_path=str(loaded.path),
                          errors=[e.as_dict() for e in loaded.errors],
                          warnings=[w.as_dict() for w in loaded.warnings],
                          **({"graders": graders} if graders else {})))
        return
    if unreadable:  # a missing file is not "invalid spec ... fix the fields above"
        err.print(f"[red]{escape(unreadable)}[/]")
        return
    err.print(f"[red]{escape(str(loaded.path))}: invalid spec[/]")
    for error in loaded.errors:
        err.print(f"  [bold]{escape(error.loc)}[/]: {escape(error.msg)}")
    err.print("Fix the fields above, then `tt validate` again.")


def load_valid(spec: Path, json_mode: bool, config: Optional[Path] = None, overrides: tuple[str, ...] = ()):
    """(plugins, the loaded spec, `--set` overrides applied); invalid: its errors printed, exit 2."""
    from tt_host.spec.loading import load_spec

    plugins = load_plugins()
    loaded = load_spec(spec, plugins, config=config, overrides=overrides)
    print_warnings(loaded)
    if not loaded.valid:
        print_errors(loaded, json_mode)
        raise typer.Exit(2)
    return plugins, loaded


def print_graders(check) -> None:
    """The spec's graders, one line each, with how many of the examples' own outputs each passes."""
    import json

    how = f"derived from the outputs: {check.graders.derived_by}" if check.graders.derived_by else "declared"
    console.print(f"Graders ({how}), each passing the examples' own outputs:", markup=False)
    for grader in check.described():
        settings = ", ".join(f"{k} {json.dumps(v)}" for k, v in grader.items()
                             if k not in ("name", "kind", "pass_at") and not k.startswith("reference_"))
        settings = settings if len(settings) <= 100 else settings[:99] + "…"
        console.print(f"- {grader['name']} ({grader['kind']}{': ' + settings if settings else ''}): "
                      f"{grader['reference_passed']}/{grader['reference_count']} references pass", markup=False)


def dry_run(loaded, resume: Optional[Path], json_mode: bool, only: Optional[frozenset[str]] = None,
            extra: Optional[dict[str, Any]] = None, device: Optional[str] = None) -> None:
    """Print what `tt run` would do with each stage (a baseline the cross-run cache holds as `reuse`); create
    nothing. Exit 2 when it would refuse."""
    from tt_host.runs.plan import preview
    from tt_host.runs.predict import with_cached_baselines

    run_dir, exists, decisions = preview(loaded, resume.absolute() if resume else None, only)
    decisions = with_cached_baselines(loaded, run_dir, decisions, device)
    refused = any(d.action == "refuse" for d in decisions)
    if json_mode:
        from tt_host.cli.jsonshapes import verdict

        emit_json({"dry_run": True, **verdict([f"{d.stage}: {d.reason}" for d in decisions if d.action == "refuse"], 2),
                   "run_dir": str(run_dir), "exists": exists,
                   "stages": [d.as_dict() for d in decisions], **(extra or {}),
                   **({"graders": loaded.grader_check.described()} if loaded.grader_check is not None else {})})
    else:
        console.print(f"{'resume' if exists else 'new run'}: {run_dir} (dry run: nothing was created)", markup=False)
        styles = {"refuse": "red", "reuse": "green", "skip": "dim", "leave": "dim", "rerun": "yellow"}
        off = [d.stage for d in decisions if d.action == "skip"]
        show_table(("stage", "would", "why"),
                   [(d.stage, Text(d.action, style=styles.get(d.action, "cyan")), d.reason) for d in decisions
                    if d.stage not in off])
        if off:  # the stages of a block the spec leaves out (a plain LoRA run's tuning stages): one line
            console.print(f"not in this run (the spec turns them off): {', '.join(off)}", markup=False)
        if loaded.grader_check is not None:
            print_graders(loaded.grader_check)
        if refused:
            err.print("[red]tt run would refuse:[/] use a new run directory, or undo the changes named above")
    raise typer.Exit(2 if refused else 0)


def run_spec(spec: Path, resume: Optional[Path], device: Optional[str], json_mode: bool, dry: bool = False,
             only: Optional[frozenset[str]] = None,
             after: Optional[Callable[[Any], dict[str, Any]]] = None, prepared: Optional[tuple] = None,
             config: Optional[Path] = None, wait: bool = True, verbose: bool = False, quiet: bool = False,
             overrides: tuple[str, ...] = ()) -> None:
    """`prepared`: (plugins, loaded spec) when the caller has loaded it already; `overrides`: `--set` arguments."""
    from tt_host.runs.progress import reporter
    from tt_host.runs.drive import execute

    if device is not None and device not in DEVICES:
        fail(f"--device must be one of {', '.join(DEVICES)}, not {device!r}", json_mode=json_mode)
    plugins, loaded = prepared or load_valid(spec, json_mode, config, overrides)
    if loaded.sweep is not None:
        err.print("note: the spec's `sweep` block is ignored by `tt run` (`tt sweep` runs it)", markup=False)
    if dry or loaded.dry_run:  # --dry-run, or a local-runner.json's `dryRun: true`
        dry_run(loaded, resume, json_mode, only, device=device)
    extra: dict[str, Any] = {}
    try:
        outcome = execute(loaded, plugins, run_dir=resume.absolute() if resume else None, device=device,
                          reporter=reporter(json_mode, verbose, quiet), only=only, wait=wait,
                          on_finish=(lambda done: extra.update(after(done))) if after is not None else None)
    except KeyboardInterrupt:
        fail("interrupted", code=EXIT_INTERRUPTED, json_mode=json_mode)
    if json_mode:
        from tt_host.cli.jsonshapes import envelope, run_keys

        failed = outcome.exit_code != 0
        error = envelope(outcome.error or f"run {outcome.status}", outcome.exit_code) if failed else None
        emit_json({"ok": not failed, "status": outcome.status, "exit_code": outcome.exit_code,
                   "run_dir": str(outcome.run_dir), "error": error, "report": outcome.report,
                   **run_keys(outcome.run_dir, outcome.report, loaded.spec_id), **extra})
    else:
        style = {"completed": "green", "interrupted": "yellow"}.get(outcome.status, "red")
        console.print(f"[{style}]run {outcome.status}[/]: {escape(str(outcome.run_dir))}")
        if outcome.error:
            err.print(f"[red]error:[/] {escape(outcome.error)}")
        if outcome.status == "interrupted":
            from tt_host.reports.ending import resume_command

            console.print(f"resume with: {resume_command(loaded.path, outcome.run_dir)}", markup=False)
        elif outcome.report:
            console.print(f"report: {outcome.run_dir / 'report.md'}", markup=False)
        if outcome.report and outcome.report.get("verdict") and outcome.status != "interrupted":
            console.print(outcome.report["verdict"], markup=False, soft_wrap=True)  # the last line: the verdict
    raise typer.Exit(outcome.exit_code)
