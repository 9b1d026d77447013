"""`tt init`: a starter tunedtensor.json with placeholders, with the Node CLI 0.13's flags (`--name`, `--model`,
`--output`, `--profile spark`, `--config`, `--force`).

The placeholders tt writes are refused by `tt validate`/`tt run` until replaced (tt_host.spec.placeholders), as
Node refused its scaffold. `--profile spark` also writes a `local-runner.json` holding only keys that take effect
in tt (the device and the evaluation time limit Node's spark profile set).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer

from tt_host.cli.common import JsonOption, console, emit_json, fail, load_plugins, os_errors_refused
from tt_host.spec.schema import DEFAULT_ENGINE

PROFILES: dict[str, dict[str, Any]] = {  # Node's spark profile, less the keys tt does not read
    "spark": {"evaluation": {"inference": {"device": "cuda"}, "timeoutMs": 1_800_000}},
}


def _refuse_existing(path: Path, force: bool, what: str, json_mode: bool) -> None:
    if path.is_symlink():
        fail(f"{path} is a symbolic link; tt never writes through one", json_mode=json_mode)
    if path.exists() and (not force or not path.is_file()):
        fail(f"{path} already exists; tt never overwrites a {what} (--force replaces a file)", json_mode=json_mode)


def init(
    directory: Optional[Path] = typer.Argument(None, help="Folder to create the spec in (default: the current "
                                               "folder)."),
    engine: str = typer.Option(DEFAULT_ENGINE, "--engine", help="Engine the spec is for."),
    name: Optional[str] = typer.Option(None, "--name", "-n", help="The spec's name."),
    model: Optional[str] = typer.Option(None, "--model", help="The base model (a hub id or a local folder)."),
    output: Optional[Path] = typer.Option(None, "--output", help="The spec file to write (instead of "
                                          "DIR/tunedtensor.json)."),
    profile: Optional[str] = typer.Option(None, "--profile", help="Also write a local-runner.json: spark (cuda, "
                                          "30-minute evaluation limit)."),
    config: Optional[Path] = typer.Option(None, "--config", help="Where --profile writes (default: "
                                          "local-runner.json beside the spec)."),
    force: bool = typer.Option(False, "--force", help="Replace files that exist."),
    json_mode: bool = JsonOption,
) -> None:
    """Write a starter tunedtensor.json with placeholders (`tt doctor` flags them)."""
    from tt_host.fsutil import write_text_atomic
    from tt_host.spec.placeholders import starter_spec

    plugins = load_plugins()
    if engine not in plugins.engines:
        fail(f"unknown engine {engine!r}; installed: {', '.join(sorted(plugins.engines)) or 'none'} (see `tt engines list`)",
             json_mode=json_mode)
    if output is not None and directory is not None:
        fail("give the folder or --output, not both", json_mode=json_mode)
    if profile is not None and profile not in PROFILES:
        fail(f"--profile must be {' or '.join(PROFILES)}, not {profile!r}", json_mode=json_mode)
    if config is not None and profile is None:
        fail("--config names where --profile writes its local-runner.json; give --profile too", json_mode=json_mode)
    spec = starter_spec(plugins.engines[engine])
    if name is not None:
        spec["name"] = name
    if model is not None:
        if "base_model" not in plugins.engines[engine].spec_model.model_fields:
            fail(f"the {engine} engine's spec has no base_model; leave out --model", json_mode=json_mode)
        spec["base_model"] = model
    target = output if output is not None else (directory or Path(".")) / "tunedtensor.json"
    folder = target.parent
    runner = (config if config is not None else folder / "local-runner.json") if profile else None
    with os_errors_refused(json_mode):
        _refuse_existing(target, force, "spec", json_mode)
        if runner is not None:
            _refuse_existing(runner, force, "config", json_mode)
        if folder.exists() and not folder.is_dir():
            fail(f"{folder} is a file, not a folder; give a folder for the spec", json_mode=json_mode)
        folder.mkdir(parents=True, exist_ok=True)
        write_text_atomic(target, json.dumps(spec, indent=2) + "\n")
        if runner is not None:
            runner.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(runner, json.dumps(PROFILES[profile], indent=2) + "\n")
    if json_mode:
        emit_json({"ok": True, "spec": str(target.absolute()), "engine": engine, "path": str(target.absolute()),
                   "id": None, "name": spec["name"], "base_model": spec.get("base_model"),
                   "config_path": str(runner.absolute()) if runner is not None else None})
    else:
        console.print(f"wrote {target}; replace the TODO placeholders, then `tt doctor {target}`", markup=False)
        if runner is not None:
            console.print(f"wrote {runner} (profile {profile})", markup=False)
