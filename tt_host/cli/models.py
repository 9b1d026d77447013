"""`tt models list|get|verify|export|activate|active|rollback|history|gc|prefetch|prefetch-benchmarks|verify-base`:
registered artifacts, which is live, and hub base models and benchmark datasets in the cache.

Logic lives in tt_host.models.registry (registry), tt_host.models.export and tt_host.models.activation.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Optional

import typer

from tt_host.cli.common import JsonOption, console, emit_json, err, escape, fail, os_errors_refused, show_table
from tt_host.cli.running import ConfigOption

app = typer.Typer(no_args_is_help=True, help="Registered models: the verified artifacts runs produced.")


@app.command("list")
def list_models(json_mode: bool = JsonOption) -> None:
    """Every registered model."""
    from tt_host.models.registry import list_models as entries

    problems: list[str] = []  # corrupt entries: named, never skipped silently
    models = entries(problems)
    if json_mode:
        emit_json({"models": models, **({"problems": problems} if problems else {})})
        return
    show_table(("id", "kind", "engine", "registered (UTC)", "held-out (exact · graders)", "path"),
               [(model.get("id"), model.get("kind"), model.get("engine"), *_date_and_score(model), model.get("path"))
                for model in models])
    for problem in problems:
        err.print(f"tt: not listed: {problem}", markup=False, highlight=False)


def _date_and_score(model: dict) -> tuple[str, str]:
    """When the model's latest version was registered, and its run's held-out figures (report.json; "—" when
    the run folder or its report is gone)."""
    import json

    from tt_host.models.versions import versions_of
    from tt_host.reports.verdict import tuned_score

    versions = versions_of(model)
    at = str((versions[-1] if versions else {}).get("registered_at") or "—").replace("T", " ").rstrip("Z")[:16]
    try:
        report = json.loads((Path(str(model.get("run_dir"))) / "report.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return at, "—"
    return at, tuned_score(report) if isinstance(report, dict) else "—"


def _model_id(reference: str) -> str:
    from tt_host.models.references import registered_id

    return registered_id(reference)


@app.command()
def verify(model: str = typer.Argument(..., help="Model id (or its unique prefix), an artifact folder or its "
                                       "artifact-manifest.json."), json_mode: bool = JsonOption) -> None:
    """Check every file of a model against its manifest; exit 1 naming what changed."""
    from tt_host.models.registry import verify_artifact, verify_model
    from tt_stagekit.manifest import MANIFEST

    path = Path(model).expanduser()
    with os_errors_refused(json_mode):
        folder = path.parent if path.name == MANIFEST and path.is_file() else path
        is_artifact = (folder / MANIFEST).is_file()
    if is_artifact:
        model_id, entry = str(folder.absolute()), {"path": str(folder.absolute())}
        _, problems = verify_artifact(folder)
    else:
        if path.exists():
            fail(f"{path} has no {MANIFEST}; give a model id, an artifact folder or its manifest",
                 json_mode=json_mode)
        model_id = _model_id(model)
        try:
            entry, problems = verify_model(model_id)
        except LookupError as exc:
            fail(str(exc), json_mode=json_mode)
    if json_mode:
        from tt_host.cli.jsonshapes import verdict

        emit_json({"id": model_id, **verdict([f"{p.file}: {p.reason}" for p in problems]), "path": entry["path"],
                   "problems": [{"file": p.file, "reason": p.reason} for p in problems]})
    elif problems:
        for problem in problems:
            err.print(f"[red]{escape(model_id)}: {escape(str(problem))}[/]")
    else:
        console.print(f"[green]{escape(model_id)}: verified[/] ({escape(str(entry['path']))})")
    raise typer.Exit(1 if problems else 0)


@app.command()
def export(
    model: str = typer.Argument(..., help="Registered model id (or its unique prefix, ID@n too), run directory or "
                               "model folder."),
    out: Path = typer.Argument(..., help="New folder to write (must not exist)."),
    fmt: str = typer.Option("hf", "--format", help="Output format: hf (Hugging Face folder), or one the model's "
                            "engine declares (the shipped engines: gguf for llama.cpp, ollama = GGUF + Modelfile)."),
    quant: Optional[str] = typer.Option(None, "--quant", help="Weight type for gguf/ollama: f16 (default), bf16, "
                                        "q8_0, q4_0 or f32."),
    merged: bool = typer.Option(False, "--merged", help="Models trained on a base (LoRA): merge them into full-precision base weights."),
    offline: bool = typer.Option(False, "--offline", help="Build engine environments from uv's cache only."),
    json_mode: bool = JsonOption,
) -> None:
    """Write MODEL as a folder other tools load, the way its engine declares (LoRA weights: optionally merged)."""
    from tt_host.models.export import export_model
    from tt_host.models.references import resolve

    from tt_host.waiting import waiting

    log = (lambda line: None) if json_mode else (lambda line: err.print(line, markup=False))
    with os_errors_refused(json_mode):
        resolved = resolve(model)
        # a terminal on stderr sees the seconds count up (--json too: stdout keeps the one JSON object)
        with waiting(err, f"exporting {resolved.model_id} as {fmt}") if err.is_terminal or not json_mode \
                else contextlib.nullcontext():
            summary = export_model(resolved, out, fmt=fmt, merged=merged, offline=offline or None, log=log,
                                   quant=quant)
    if json_mode:
        emit_json(summary)
    else:
        console.print(f"[green]exported[/] {escape(str(summary['model']))} ({summary['kind']}) to "
                      f"{escape(str(summary['path']))}")
        if summary.get("ollama_create"):
            console.print(f"load it into Ollama with: {summary['ollama_create']}", markup=False, soft_wrap=True)


@app.command()
def get(model_id: str = typer.Argument(..., help="Model id, its unique prefix or ID@n, one version (see `tt models "
                                      "list`)."), json_mode: bool = JsonOption) -> None:
    """One registered model (or one version of it, `ID@n`): its entry, whether it is active, and its run's gate."""
    from tt_host.models.activation import current, gate_of
    from tt_host.models.registry import get_model, get_version
    from tt_host.models.versions import split_reference

    model_id = _model_id(model_id)
    _, number = split_reference(model_id)  # a version that is not ASCII digits: VersionError, exit 2
    entry = get_model(model_id) if number is None else get_version(model_id)  # a version it lacks: exit 2
    if entry is None:
        fail(f"no registered model {model_id!r}; see `tt models list`", json_mode=json_mode)
    state = current()
    active = state["model"] == entry["id"] and (number is None or state.get("version") == number)
    info = {**entry, "active": active, "gate": gate_of(entry)}
    if json_mode:
        emit_json(info)
        return
    for key, value in info.items():
        if key == "gate":
            value = value["status"] + "".join(f"; {f}" for f in value.get("failures") or [])
        console.print(f"{key:<22} {value}", markup=False)


@app.command()
def activate(
    model_id: str = typer.Argument(..., help="Model id or its unique prefix (see `tt models list`)."),
    force: bool = typer.Option(False, "--force", help="Activate although the general-regression gate failed or was "
                               "not run (recorded in the history)."),
    json_mode: bool = JsonOption,
) -> None:
    """Make MODEL the active one (`tt serve active`). Refuses, exit 1, a model that fails verification or whose
    general-regression gate failed or was not run."""
    from tt_host.models import activation

    model_id = _model_id(model_id)
    record = activation.activate(model_id, force=force)
    if json_mode:
        emit_json({"ok": True, **record})
    elif record.get("already_active"):
        console.print(f"{model_id} is already active", markup=False)
    else:
        forced = f" [yellow](forced: {escape(record['overrode'])})[/]" if record["forced"] else ""
        console.print(f"[green]active[/] {escape(model_id)} (gate {record['gate']}){forced}")


@app.command()
def active(json_mode: bool = JsonOption) -> None:
    """The active model and version (or the base model after a rollback past the first activation). Exit 1 when
    the active version's manifest is no longer the one activated (both sha256s named)."""
    from tt_host.models.activation import active_reference, check_active, current

    state = current()
    if state["model"]:
        check_active(state)
    if json_mode:
        emit_json(state)
    elif state["model"]:
        console.print(f"{active_reference(state)} (since {state['since']})", markup=False)
    elif state["base_of"]:
        console.print(f"base model of {state['base_of']} (since {state['since']})", markup=False)
    else:
        console.print("no model is active; `tt models activate ID`")


@app.command()
def rollback(json_mode: bool = JsonOption) -> None:
    """Back to the previously active model, or to the base model when there was none."""
    from tt_host.models import activation

    record = activation.rollback()
    if json_mode:
        emit_json({"ok": True, **record})
    elif record["model"]:
        console.print(f"[green]active[/] {escape(record['model'])} (rolled back from {escape(record['previous'])})")
    else:
        console.print(f"[green]active[/] the base model of {escape(record['previous'])} (rolled back)")


@app.command()
def history(model: Optional[str] = typer.Argument(None, help="A model id (or unique prefix): list its versions."),
            json_mode: bool = JsonOption) -> None:
    """Every activation and rollback, oldest first (append-only); with MODEL, that model's versions."""
    from tt_host.models.activation import history_path, read_history

    if model is not None:
        _versions(model, json_mode)
        return
    records = read_history()
    if json_mode:
        emit_json({"path": str(history_path()), "history": records})
        return
    for r in records:
        forced = " (forced)" if r.get("forced") else ""
        version = f"@{r['version']}" if r.get("model") and r.get("version") is not None else ""
        console.print(f"{r['at']}  {r['action']:<8} {r.get('model') or 'base'}{version}{forced}", markup=False)


def _versions(model: str, json_mode: bool) -> None:
    from tt_host.models.activation import current
    from tt_host.models.registry import get_model
    from tt_host.models.versions import versions_of

    entry = get_model(_model_id(model))
    if entry is None:
        fail(f"no registered model {model!r}; see `tt models list`", json_mode=json_mode)
    state, listed = current(), versions_of(entry)
    active = (state.get("version") or listed[-1]["version"]) if state["model"] == entry["id"] else None
    rows = [{**{k: v for k, v in version.items() if k != "system_message"}, "active": version["version"] == active}
            for version in listed]
    if json_mode:
        emit_json({"id": entry["id"], "versions": rows})
        return
    show_table(("version", "registered", "manifest sha256", "state", "path"),
               [(str(r["version"]), r.get("registered_at") or "", (r.get("manifest_sha256") or "")[:16],
                 "removed" if r.get("removed") else ("active" if r["active"] else ""), r.get("path") or "")
                for r in rows])


@app.command()
def gc(dry_run: bool = typer.Option(False, "--dry-run", help="List what would be removed; remove nothing."),
       json_mode: bool = JsonOption) -> None:
    """Remove the files of model versions nothing points at: neither a model's latest version nor one the
    activation history can return to (tt models active / rollback). Their records stay, marked removed."""
    from tt_host.models.gc import collect

    found = collect(dry_run=dry_run)
    if json_mode:
        emit_json({"dry_run": dry_run, **found})
        return
    verb = "would remove" if dry_run else "removed"
    for item in found["removed"]:
        console.print(f"{verb} {item['id']}@{item['version']} ({item['path']})", markup=False)
    for path in found["half_made_copies"]:  # copies a killed registration left half made
        console.print(f"{verb} the half-made copy {path}", markup=False)
    if not found["removed"] and not found["half_made_copies"]:
        console.print("nothing to remove: every kept version is the latest of its model or on the activation "
                      "stack", markup=False)


@app.command()
def prefetch(repo: str = typer.Argument("tunedtensor.json", help="Hub id (org/name) of a base model, or a spec "
                                        "whose base model to fetch (default: ./tunedtensor.json)."),
             revision: Optional[str] = typer.Option(None, "--revision", help="Commit, branch or tag (default: the "
                                                    "spec's base_model_revision, else main)."),
             config: Optional[Path] = ConfigOption, json_mode: bool = JsonOption) -> None:
    """Download a hub base model into the Hugging Face cache (offline: find it there); print its commit and the
    spec line that pins it."""
    from tt_host.cli.common import load_plugins
    from tt_host.cli.jsonshapes import verdict
    from tt_host.models.basemodel import prefetch as fetch

    repo, revision, input_path = _base_of(repo, revision, config, json_mode)
    data = fetch(load_plugins(), repo, revision or "main")
    if json_mode:
        emit_json({**verdict(data["problems"]), **data, "input_path": input_path})
    else:
        console.print(f"{repo}@{revision or 'main'} is commit {data['commit']} ({data['path']})", markup=False)
        console.print(f"pin it in the spec with:  {data['pin']}", markup=False)
        for problem in data["problems"]:
            err.print(f"[red]{escape(problem)}[/]")
    raise typer.Exit(1 if data["problems"] else 0)


@app.command("prefetch-benchmarks")
def prefetch_benchmarks(spec: Path = typer.Option(Path("tunedtensor.json"), "--spec",
                                                  help="The spec whose evaluation.benchmarks to fetch."),
                        json_mode: bool = JsonOption) -> None:
    """Download the datasets of the spec's named lm-eval tasks (arc_easy, ...) into the Hugging Face datasets cache,
    where the offline gate stages read them; local task files need nothing."""
    from tt_host.cli.running import load_valid
    from tt_host.models.basemodel import prefetch_benchmarks as fetch

    plugins, loaded = load_valid(spec, json_mode)
    data = fetch(plugins, loaded)
    if json_mode:
        emit_json({"ok": True, **data})
        return
    for task in data["fetched"]:
        console.print(f"{task}: its dataset is in the Hugging Face datasets cache", markup=False)
    if not data["fetched"]:
        console.print(f"{spec}: no named lm-eval task to fetch (local task files are read from their folders)",
                      markup=False)


def _base_of(repo: str, revision: Optional[str], config: Optional[Path], json_mode: bool
             ) -> tuple[str, Optional[str], Optional[str]]:
    """(hub id, revision, the spec's path or None): a spec path (Node's `tt models prefetch tunedtensor.json`)
    gives its base model and revision; a hub id is itself."""
    from tt_host.cli.jsonshapes import spec_path_given
    from tt_host.cli.running import load_valid
    from tt_host.models.basemodel import spec_base

    if not spec_path_given(repo):
        return repo, revision, None
    _, loaded = load_valid(Path(repo), json_mode, config)
    found = spec_base(loaded)
    if found is None:
        fail(f"{repo}: the base model is not a hub id; give one: tt models prefetch ORG/NAME", json_mode=json_mode)
    return found[0], revision or found[1], str(loaded.path)


@app.command("verify-base")
def verify_base(repo: Optional[str] = typer.Argument(None, help="Hub id, or a spec whose base model to check "
                                                     "(default: ./tunedtensor.json or --spec)."),
                revision: Optional[str] = typer.Option(None, "--revision", help="Commit, branch or tag (default: "
                                                       "the spec's base_model_revision, else main)."),
                spec: Path = typer.Option(Path("tunedtensor.json"), "--spec", help="The spec whose base model to check."),
                config: Optional[Path] = ConfigOption, json_mode: bool = JsonOption) -> None:
    """Check that the cached snapshot of a hub base model is complete (config, weights, every file present); exit 1
    naming what is missing."""
    from tt_host.cli.running import load_valid
    from tt_host.models.basemodel import spec_base, verify_base as check

    input_path = None
    if repo is not None:
        repo, revision, input_path = _base_of(repo, revision, config, json_mode)
    if repo is None:
        _, loaded = load_valid(spec, json_mode, config)
        input_path = str(loaded.path)
        found = spec_base(loaded)
        if found is None:
            fail(f"{spec}: the base model is not a hub id with a revision; give one: tt models verify-base ORG/NAME",
                 json_mode=json_mode)
        repo, revision = found[0], revision or found[1]
    data = {"repo": repo, "revision": revision or "main", **check(repo, revision or "main"), "input_path": input_path}
    if json_mode:
        from tt_host.cli.jsonshapes import verdict

        emit_json({**verdict(data["problems"]), **data})
    elif data["problems"]:
        for problem in data["problems"]:
            err.print(f"[red]{escape(repo)}: {escape(problem)}[/]")
    else:
        console.print(f"[green]{escape(repo)}@{escape(data['commit'])}: complete[/] ({data['files']} files, "
                      f"{escape(data['path'])})")
    raise typer.Exit(1 if data["problems"] else 0)
