"""`tt models export`: write a model as a folder other tools load (host side; never imports torch).

How a model is exported is its engine's declaration (`ModelKind.export`, and
`ModelKind.export_merged` for `--merged`, see tt_host.engine): either a
module run as `python -m MODULE REQUEST.json` in the engine's environment,
or a verbatim copy of a folder already in the target format.

OUT must not exist (tt never overwrites user files). The engine writes into a
hidden sibling folder; the host verifies its `artifact-manifest.json` and
only then renames it to OUT. `serving_folder` keeps a verified export of a
model served through its export (SERVE_EXPORT) under `<run>/export/hf` for `tt serve`.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Optional

from tt_host.errors import TTError
from tt_host import ids

from tt_host.engines import envs
from tt_host.engine import SERVE_EXPORT, SERVE_HF, Export
from tt_host.fsutil import make_private_dir, sha256_file, write_json_atomic
from tt_host.models.registry import MANIFEST, tt_home, verify_artifact
from tt_host.models.references import ModelRefError, ResolvedModel
from tt_stagekit.contract import EXIT_INTERRUPTED
from tt_stagekit.files import REFUSE, publish_folder

FORMATS = ("hf",)


class ExportError(TTError):
    """The model cannot be exported as asked (exit 1; 2 for a bad argument)."""


def engine_python(name: str, offline: Optional[bool], log: Callable[[str], None]) -> Path:
    """The engine's hashed environment (built when needed), as `tt run` uses it."""
    from tt_host.plugins import UnknownEngineError, plugins

    try:
        engine = plugins().engine(name)
    except UnknownEngineError as exc:
        raise ExportError(f"{exc}; install the {name} engine plugin (tt engines install {name})", exit_code=2) from None
    try:
        return envs.ensure_env(engine, offline=offline, log=log).python
    except envs.EnvBuildError as exc:
        raise ExportError(str(exc)) from None


def run_engine_module(engine: str, module: str, request: dict[str, Any], offline: Optional[bool],
                      log: Callable[[str], None]) -> None:
    """Run `python -m module REQUEST.json` in the engine env (signals forwarded); raise on failure."""
    from tt_host.engines.runner import run_stage

    python = engine_python(engine, offline, log)
    with tempfile.TemporaryDirectory(prefix="tt-export-") as tmp:
        request_path = Path(tmp) / "request.json"
        write_json_atomic(request_path, request)

        def on_event(event: dict[str, Any]) -> None:
            if event.get("type") == "log" and event.get("message"):
                log(str(event["message"]))

        outcome = run_stage(python, module, request_path, Path(tmp), Path(tmp) / "export.log", on_event)
    if outcome.interrupted:
        raise ExportError("interrupted", exit_code=EXIT_INTERRUPTED)
    if outcome.exit_code != 0:
        detail = outcome.last_error or "\n".join(outcome.tail[-10:]) or f"exit {outcome.exit_code}"
        raise ExportError(f"{module} failed: {detail}", exit_code=2 if outcome.exit_code == 2 else 1)


def _staging(out: Path) -> Path:
    return out.with_name(f".{out.name}.tt-export-{os.getpid()}")


def _finish(staging: Path, out: Path) -> None:
    manifest, problems = verify_artifact(staging)
    if problems:
        shutil.rmtree(staging, ignore_errors=True)
        raise ExportError("the export failed verification: " + "; ".join(map(str, problems)))
    try:
        publish_folder(staging, out, REFUSE)
    except FileExistsError:
        raise ExportError(f"{out} appeared while exporting; nothing was overwritten", exit_code=2) from None


def _engine_export(model: ResolvedModel, how: Export, staging: Path, offline: Optional[bool],
                   log: Callable[[str], None]) -> None:
    request = {"source": str(model.path), "out": str(staging), "model_id": model.model_id,
               "system_message": model.system_message, "system_message_sha256": model.system_message_sha256}
    run_engine_module(str(model.engine), str(how.module), request, offline, log)


def export_plan(model: ResolvedModel, merged: bool) -> Export:
    """The engine's declared way to export `model` (exit 2 when there is none)."""
    declared = model.model_kind
    how = (declared.export_merged if merged else declared.export) if declared else None
    if how is not None:
        return how
    if merged:
        raise ExportError(f"--merged applies to models trained on a base model; {model.model_id} is of kind "
                          f"{model.kind!r}, exported whole without --merged", exit_code=2)
    if model.form == SERVE_HF:
        raise ExportError(f"{model.path} is already a Hugging Face model folder; copy it as it is", exit_code=2)
    raise ExportError(f"models of kind {model.kind!r} cannot be exported: engine {model.engine!r} declares no "
                      "export for them", exit_code=2)


def export_model(model: ResolvedModel, out: Path, fmt: str = "hf", merged: bool = False,
                 offline: Optional[bool] = None, log: Callable[[str], None] = lambda line: None) -> dict[str, Any]:
    """Write `model` to the new folder `out`; returns a summary for --json."""
    if fmt not in FORMATS:
        raise ExportError(f"--format must be one of {', '.join(FORMATS)}, not {fmt!r}", exit_code=2)
    out = out.expanduser().absolute()
    if out.exists() or out.is_symlink():
        raise ExportError(f"{out} already exists; tt never overwrites it (choose a new folder)", exit_code=2)
    how = export_plan(model, merged)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = _staging(out)
    shutil.rmtree(staging, ignore_errors=True)
    try:
        if how.module is None:
            shutil.copytree(model.path, staging)
        else:
            _engine_export(model, how, staging, offline, log)
        _finish(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return {"ok": True, "model": model.model_id, "kind": how.produces, "source": str(model.path), "path": str(out),
            "files": sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())}


def _export_is_current(folder: Path, model: ResolvedModel) -> bool:
    _, problems = verify_artifact(folder)
    if problems:
        return False
    try:
        info = json.loads((folder / "tt-export.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return False
    source_manifest = model.path / MANIFEST
    recorded = (info.get("source") or {}).get("manifest_sha256")
    return bool(recorded) and source_manifest.is_file() and recorded == sha256_file(source_manifest) \
        and info.get("system_message") == model.system_message


def serving_folder(model: ResolvedModel, offline: Optional[bool], log: Callable[[str], None]) -> Path:
    """A verified Hugging Face export of a model served through its export, made once and reused
    (`<run>/export/hf`)."""
    if model.form != SERVE_EXPORT:
        raise ModelRefError(f"{model.path} is not served through an export (kind {model.kind!r})")
    if model.run_dir is not None and os.access(model.run_dir, os.W_OK):
        owner = model.run_dir
        folder = owner / "export" / "hf"
    else:
        owner = tt_home() / "exports"
        folder = owner / ids.folder_name(model.model_id)  # the id may come from an edited run.json
    try:
        ids.inside(folder, owner)
    except ids.OutsideError as exc:
        raise ExportError(f"{exc}; not exporting {model.model_id!r} there", exit_code=2) from None
    if folder.is_dir() and _export_is_current(folder, model):
        return folder
    make_private_dir(folder.parent)  # <run>/export (proven inside the run above) or $TT_HOME/exports
    if folder.exists() or folder.is_symlink():
        log(f"replacing the stale export {folder}")
        if folder.is_symlink() or not folder.is_dir():
            folder.unlink()
        else:
            shutil.rmtree(ids.inside(folder, owner))
    log(f"exporting {model.model_id} to {folder}")
    export_model(model, folder, offline=offline, log=log)
    return folder
