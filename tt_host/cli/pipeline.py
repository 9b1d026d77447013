"""`tt pipeline init|validate|plan|run`: pipeline documents (tunedtensor.pipeline.json, Pipeline v1) over a spec.

The document is tt_host.pipelines.document's; its steps become the engine's stages by tt_host.pipelines.steps;
the run is `tt run`'s limited to those stages. Without a document (no -f and no ./tunedtensor.pipeline.json)
`tt pipeline run --spec S --resume DIR` is `tt run S --resume DIR`, the form the long-run guide uses.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer

from tt_host.cli.common import JsonOption, console, emit_json, err, escape, fail, os_errors_refused, show_table
from tt_host.cli.running import SPEC_DEFAULT, ConfigOption, SetOption, dry_run, load_valid, run_spec

app = typer.Typer(no_args_is_help=True, help="Pipeline documents (tunedtensor.pipeline.json): init, validate, plan, run.")

DOCUMENT = Path("tunedtensor.pipeline.json")
FileOption = typer.Option(None, "--file", "-f", help="The pipeline document (default: ./tunedtensor.pipeline.json "
                          "when it exists).")
SpecOption = typer.Option(SPEC_DEFAULT, "--spec", help="Path to the spec (default: ./tunedtensor.json).")
OnlyOption = typer.Option(None, "--only", help="Run only these step ids (repeat it, or separate ids by commas).")
SkipOption = typer.Option(None, "--skip", help="Leave out these step ids (repeat it, or separate ids by commas).")


def _ids(values: Optional[list[str]]) -> list[str]:
    return [part.strip() for value in values or [] for part in value.split(",") if part.strip()]


def _runtimes() -> tuple[str, ...]:
    """The runtime keywords of the installed engines' pipeline vocabularies."""
    from tt_host.pipelines.steps import runtimes
    from tt_host.plugins import plugins

    return runtimes(plugins().engines.values())


def _read(file: Path, json_mode: bool) -> dict[str, Any]:
    """The normalized document; an unreadable or invalid one ends the command (exit 2) naming each problem."""
    from tt_host.pipelines.document import DocumentError, check_local, normalize
    from tt_host.spec.loading import read_json

    with os_errors_refused(json_mode):
        raw, errors = read_json(file.expanduser().absolute())
    if raw is None:
        fail("; ".join(e.msg for e in errors), json_mode=json_mode)
    try:
        normalized = normalize(raw, _runtimes())
        check_local(normalized)
    except DocumentError as exc:
        fail(f"{file}: invalid pipeline: " + "; ".join(exc.problems), json_mode=json_mode, problems=exc.problems)
    return normalized


def _document(file: Optional[Path], json_mode: bool) -> Optional[dict[str, Any]]:
    if file is None and DOCUMENT.is_file():
        file = DOCUMENT
    return _read(file, json_mode) if file is not None else None


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def init(
    ctx: typer.Context,
    directory: Path = typer.Argument(Path("."), help="Folder to write tunedtensor.pipeline.json in."),
    file: Optional[Path] = typer.Option(None, "--file", "-f", help="Write the document to this file instead "
                                        "(Node's `tt pipeline init --file FILE`)."),
    spec: Path = typer.Option(SPEC_DEFAULT, "--spec", help="With --RUNTIME: the spec whose settings the recipe takes "
                              "(default: ./tunedtensor.json, when it is a spec of that runtime)."),
    json_mode: bool = JsonOption,
) -> None:
    """Write the canonical pipeline document: default-local (baseline, train, candidate, compare), or with
    --RUNTIME (an installed engine's pipeline runtime, `tt engines list`) the contract's from-scratch recipe
    default-RUNTIME, fitted to the spec beside it (its settings; an rl step when it runs RL). Never overwrites."""
    from tt_host.fsutil import write_text_atomic
    from tt_host.pipelines.document import canonical_local, canonical_runtime

    declared = _runtimes()
    extra = list(ctx.args)  # the --RUNTIME flags, and DIR when it came after one of them (click reads the flag as DIR)
    if str(directory).startswith("-"):
        extra, directory = [str(directory)] + extra, Path(".")
    if directory == Path(".") and sum(not arg.startswith("-") for arg in extra) == 1:
        directory = Path(next(arg for arg in extra if not arg.startswith("-")))
        extra.remove(str(directory))
    chosen = [arg[2:] for arg in extra if arg.startswith("--") and arg[2:] in declared]
    unknown = [arg for arg in extra if not (arg.startswith("--") and arg[2:] in declared)]
    if unknown or len(chosen) > 1:
        flags = ", ".join(f"--{name}" for name in declared) or "none installed"
        given = " ".join(unknown or [f"--{name}" for name in chosen])
        fail(f"tt pipeline init: unexpected {given} (the from-scratch recipes: {flags})",
             json_mode=json_mode)
    document = canonical_runtime(chosen[0]) if chosen else canonical_local()
    if chosen:
        document = _fitted(document, chosen[0], spec, json_mode)
    if file is not None and directory != Path("."):
        fail("give the folder or --file, not both", json_mode=json_mode)
    target = file if file is not None else directory / DOCUMENT.name
    directory = target.parent
    with os_errors_refused(json_mode):
        if target.exists() or target.is_symlink():
            fail(f"{target} already exists; tt never overwrites a pipeline document", json_mode=json_mode)
        if not directory.is_dir():
            fail(f"{directory} is not a folder; create it first", json_mode=json_mode)
        write_text_atomic(target, json.dumps(document, indent=2) + "\n")
    if json_mode:
        emit_json({"ok": True, "file": str(target.absolute()), "name": document["name"]})
    else:
        console.print(f"wrote {target} ({document['name']}); `tt pipeline plan` shows what it runs", markup=False)


def _fitted(document: dict[str, Any], runtime: str, spec: Path, json_mode: bool) -> dict[str, Any]:
    """The recipe fitted to `spec` when it is a valid spec of an engine with this runtime (else as it is)."""
    from tt_host.pipelines.recipe import fit
    from tt_host.plugins import plugins
    from tt_host.spec.loading import load_spec

    if not spec.is_file():
        return document
    loaded = load_spec(spec, plugins())
    vocabulary = loaded.engine.pipeline_vocabulary if loaded.engine is not None else None
    if not loaded.valid or vocabulary is None or vocabulary.runtime != runtime:
        if not json_mode:
            err.print(f"[yellow]warning:[/] {escape(str(spec))} is not a valid {escape(runtime)} spec; wrote the "
                      "contract's recipe as it is (its settings warn against a spec, the spec decides)")
        return document
    return fit(document, loaded.engine, loaded.spec)


@app.command()
def validate(file: Optional[Path] = typer.Argument(None, help="The pipeline document (default: "
                                                   "./tunedtensor.pipeline.json)."),
             file_option: Optional[Path] = typer.Option(None, "--file", "-f", help="The pipeline document, as an "
                                                        "option (Node's form)."),
             json_mode: bool = JsonOption) -> None:
    """Check a pipeline document against the Pipeline v1 contract and print its normalized form. Exit 2 naming the
    step when invalid."""
    if file is not None and file_option is not None:
        fail("give the document once: FILE or --file", json_mode=json_mode)
    file = file or file_option
    document = _read(file or DOCUMENT, json_mode)
    if json_mode:
        emit_json({"ok": True, "valid": True, "pipeline": document, "file": str((file or DOCUMENT).absolute())})
        return
    console.print(f"[green]valid[/] {escape(str(file or DOCUMENT))}: {len(document['steps'])} steps")
    typer.echo(json.dumps(document, indent=2))


def _steps(document: Optional[dict[str, Any]], loaded, only: list[str], skip: list[str], json_mode: bool):
    """(selected steps, each step's stages, the stages to run, warnings); without a document, every stage."""
    from tt_host.pipelines.document import DocumentError, select
    from tt_host.pipelines.steps import setting_warnings, stages_for

    if document is None:
        if only or skip:
            fail("--only and --skip select steps of a pipeline document; give one with -f (or write one with "
                 "`tt pipeline init`)", json_mode=json_mode)
        return [], {}, None, []
    try:
        steps = select(document, only, skip)
        own = stages_for(loaded.engine, loaded.spec, steps, document)
    except DocumentError as exc:
        fail("invalid pipeline: " + "; ".join(exc.problems), json_mode=json_mode, problems=exc.problems)
    warnings = setting_warnings(loaded.engine, loaded.spec, steps)
    for warning in warnings:
        err.print(f"[yellow]warning:[/] {escape(warning)}")
    return steps, own, frozenset(name for names in own.values() for name in names), warnings


@app.command()
def plan(
    file: Optional[Path] = FileOption, spec: Path = SpecOption,
    resume: Optional[Path] = typer.Option(None, "--resume", help="Run directory the run would use."),
    only: Optional[list[str]] = OnlyOption, skip: Optional[list[str]] = SkipOption,
    config: Optional[Path] = ConfigOption, overrides: list[str] = SetOption, json_mode: bool = JsonOption,
) -> None:
    """Each step, the engine stages it runs, and what the run would do with every stage; creates nothing."""
    document = _document(file, json_mode)
    _, loaded = load_valid(spec, json_mode, config, tuple(overrides))
    steps, own, stages, warnings = _steps(document, loaded, _ids(only), _ids(skip), json_mode)
    listed = [{"id": s["id"], "uses": s["uses"], "stages": own[s["id"]]} for s in steps]
    if not json_mode:
        show_table(("step", "uses", "stages"), [(s["id"], s["uses"], ", ".join(s["stages"]) or "—") for s in listed])
    dry_run(loaded, resume, json_mode, stages, {"steps": listed, "warnings": warnings})


@app.command()
def run(
    file: Optional[Path] = FileOption, spec: Path = SpecOption,
    resume: Optional[Path] = typer.Option(None, "--resume", help="Run directory to start or continue."),
    device: Optional[str] = typer.Option(None, "--device", help="auto, cpu, cuda or mps."),
    dry_run_: bool = typer.Option(False, "--dry-run", help="Print what would run, be reused or refused; create "
                                  "nothing (as `tt pipeline plan`)."),
    only: Optional[list[str]] = OnlyOption, skip: Optional[list[str]] = SkipOption,
    config: Optional[Path] = ConfigOption, overrides: list[str] = SetOption, json_mode: bool = JsonOption,
) -> None:
    """Run the steps of a pipeline document over a spec (without one: every stage, as `tt run --resume`). Each
    evaluate and compare step writes <run>/evaluations/<step>.json."""
    from tt_host.pipelines.steps import write_evaluations

    document = _document(file, json_mode)
    if document is None:
        run_spec(spec, resume, device, json_mode, dry_run_, config=config, overrides=tuple(overrides))
    plugins, loaded = load_valid(spec, json_mode, config, tuple(overrides))
    steps, own, stages, _ = _steps(document, loaded, _ids(only), _ids(skip), json_mode)

    def after(outcome) -> dict[str, Any]:
        from tt_host.runs.store import RunDir

        try:
            state = RunDir(outcome.run_dir).load()
            written = write_evaluations(outcome.run_dir, loaded.engine, steps, own, outcome.report or {}, state)
        except (OSError, ValueError) as exc:
            err.print(f"[yellow]warning:[/] the steps' evaluation files were not written: {escape(str(exc))}")
            written = []
        return {"steps": [{"id": s["id"], "uses": s["uses"], "stages": own[s["id"]],
                           "evaluation": (f"evaluations/{s['id']}.json" if s["id"] in written else None)}
                          for s in steps]}

    run_spec(spec, resume, device, json_mode, dry_run_, only=stages, after=after, prepared=(plugins, loaded))
