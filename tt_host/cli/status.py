"""`tt info` (this tt: version, where its store and caches are, its engines) and `tt status` (a project: the spec, the
config, the active model and the latest run). Both only read: neither creates a file or folder.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional

import typer

from tt_host import __version__
from tt_host.cli.common import JsonOption, console, emit_json, load_plugins
from tt_host.cli.running import SPEC_DEFAULT, ConfigOption


def _show(data: dict[str, Any], indent: str = "") -> None:
    for key, value in data.items():
        if isinstance(value, dict):
            console.print(f"{indent}{key}:", markup=False)
            _show(value, indent + "  ")
        else:
            shown = ", ".join(map(str, value)) if isinstance(value, list) else ("—" if value is None else value)
            console.print(f"{indent}{key:<16} {shown}", markup=False)


def info(json_mode: bool = JsonOption) -> None:
    """This tt: its version, where it keeps models, runs and environments, the Hugging Face cache, its engines."""
    from tt_host.engines.envs import envs_root
    from tt_host.models.activation import history_path
    from tt_host.models.registry import registry_dir, tt_home
    from tt_host.runs.index import index_dir
    from tt_host.spec.hub_cache import cache_dir

    plugins = load_plugins()
    data = {"version": __version__, "status": "local", "python": sys.version.split()[0], "tt_home": str(tt_home()),
            "models": str(registry_dir()), "run_index": str(index_dir()), "activations": str(history_path()),
            "environments": str(envs_root()), "hf_cache": str(cache_dir()), "engines": sorted(plugins.engines)}
    if json_mode:
        emit_json(data)
    else:
        _show(data)


def _spec_summary(spec: Path, config: Optional[Path]) -> dict[str, Any]:
    from tt_host.spec.loading import load_spec

    if not spec.is_file():
        return {"path": str(spec.absolute()), "found": False}
    loaded = load_spec(spec, load_plugins(), config=config)
    return {"path": str(loaded.path), "found": True, "valid": loaded.valid, "engine": loaded.engine_name,
            "name": loaded.spec.name if loaded.spec else (loaded.raw or {}).get("name"), "spec_id": loaded.spec_id,
            "errors": [e.as_dict() for e in loaded.errors], "warnings": [w.as_dict() for w in loaded.warnings],
            "config": str(loaded.config) if loaded.config else None}


def _latest_run(spec: Path, anywhere: bool = False) -> Optional[dict[str, Any]]:
    """The newest run of this project: under its .tuned-tensor/runs or indexed with this spec; `anywhere`: the
    newest run in the run index, whatever its spec (shown when there is no spec here, as after
    `tt run some/folder/tunedtensor.json` from the folder above it)."""
    from tt_host.runs import index
    from tt_host.runlayout import RUNS_FOLDER
    from tt_host.runs.store import RunDir, find_runs

    spec = spec.absolute()
    folders = {p.absolute() for p in find_runs(spec.parent.joinpath(*RUNS_FOLDER))}
    folders |= {Path(e["run_dir"]) for e in index.entries()
                if (anywhere or e.get("spec_path") == str(spec)) and not e["missing"]}
    runs = []
    for folder in folders:
        try:
            state = RunDir(folder).load()
        except (OSError, ValueError, RecursionError):
            continue
        if isinstance(state, dict):
            runs.append({"id": state.get("id"), "run_dir": str(folder), "status": state.get("status"),
                         "updated_at": state.get("updated_at"), "spec_path": state.get("spec_path")})
    return max(runs, key=lambda r: str(r["updated_at"] or ""), default=None)


def status(spec: Path = typer.Argument(SPEC_DEFAULT, help="The project's spec (default: ./tunedtensor.json)."),
           config: Optional[Path] = ConfigOption, json_mode: bool = JsonOption) -> None:
    """The project here: its spec, the local-runner.json applied, the active model, the latest run; creates nothing."""
    from tt_host.models.activation import current

    active = current()
    data = {"spec": _spec_summary(spec, config), "active_model": active["model"],
            "active_base_of": active["base_of"], "latest_run": _latest_run(spec)}
    if data["latest_run"] is None and not spec.is_file():
        data["latest_run_anywhere"] = _latest_run(spec, anywhere=True)
    if json_mode:
        emit_json(data)
        return
    summary = data["spec"]
    shown = {"spec": summary["path"] + ("" if summary["found"] else " (not found; `tt init DIR`)")}
    if summary["found"]:
        shown.update({"engine": summary["engine"], "name": summary["name"],
                      "valid": "yes" if summary["valid"] else f"no ({len(summary['errors'])} errors: `tt validate`)",
                      "warnings": len(summary["warnings"]), "config": summary["config"]})
    shown["active model"] = data["active_model"] or (f"base of {data['active_base_of']}" if data["active_base_of"]
                                                     else None)
    latest = data["latest_run"]
    shown["latest run"] = f"{latest['id']} {latest['status']} ({latest['run_dir']})" if latest else None
    elsewhere = data.get("latest_run_anywhere")
    if elsewhere:
        shown["latest run"] = (f"{elsewhere['id']} {elsewhere['status']} ({elsewhere['run_dir']}; "
                               f"spec {elsewhere['spec_path']}, not here)")
    _show(shown)
