"""`tt models export`: write a model as a folder other tools load (host side; never imports torch).

How a model is exported is its engine's declaration (`ModelKind.export`, and
`ModelKind.export_merged` for `--merged`; `ModelKind.formats[NAME]` for `--format NAME`
other than hf, e.g. gguf or ollama, see tt_host.engine): either a
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

HF = "hf"  # always there: ModelKind.export / export_merged; other formats are declared per kind (ModelKind.formats)


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
            if event.get("type") == "log" and event.get("message") and not event.get("noise"):
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
                   log: Callable[[str], None], options: dict[str, Any]) -> None:
    request = {"source": str(model.path), "out": str(staging), "model_id": model.model_id,
               "system_message": model.system_message, "system_message_sha256": model.system_message_sha256,
               **options}
    run_engine_module(str(model.engine), str(how.module), request, offline, log)


def format_plan(model: ResolvedModel, fmt: str, quant: Optional[str]) -> tuple[Export, dict[str, Any]]:
    """The engine's declared way to write `model` in the format `fmt` (not hf) and the request's format fields."""
    formats = dict(model.model_kind.formats) if model.model_kind else {}
    if fmt not in formats:
        offered = ", ".join([HF, *sorted(formats)])
        raise ExportError(f"--format {fmt!r}: a model of kind {model.kind!r} exports as {offered}", exit_code=2)
    how = formats[fmt]
    if quant is not None and quant not in how.quants:
        allowed = f"one of {', '.join(how.quants)}" if how.quants else "not accepted"
        raise ExportError(f"--quant {quant!r} for --format {fmt}: {allowed}", exit_code=2)
    return how, {"format": fmt, "quant": quant if quant is not None else (how.quants[0] if how.quants else None)}


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


def export_model(model: ResolvedModel, out: Path, fmt: str = HF, merged: bool = False,
                 offline: Optional[bool] = None, log: Callable[[str], None] = lambda line: None,
                 quant: Optional[str] = None) -> dict[str, Any]:
    """Write `model` to the new folder `out`; returns a summary for --json.

    A format other than hf writes what the model kind's `formats` entry declares; a model on a base (LoRA)
    is merged into it for those, so `--merged` adds nothing there."""
    out = out.expanduser().absolute()
    if out.exists() or out.is_symlink():
        raise ExportError(f"{out} already exists; tt never overwrites it (choose a new folder)", exit_code=2)
    if fmt == HF:
        if quant is not None:
            raise ExportError("--quant applies to formats that quantize (gguf, ollama), not to hf", exit_code=2)
        how, options = export_plan(model, merged), {}
    else:
        how, options = format_plan(model, fmt, quant)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = _staging(out)
    shutil.rmtree(staging, ignore_errors=True)
    try:
        if how.module is None:
            shutil.copytree(model.path, staging)
        else:
            _engine_export(model, how, staging, offline, log, options)
        _finish(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    summary = {"ok": True, "model": model.model_id, "kind": how.produces, "source": str(model.path), "path": str(out),
               "format": fmt, **({"quant": options["quant"]} if options.get("quant") else {}),
               "files": sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())}
    if (out / "Modelfile").is_file():
        summary["ollama_create"] = f"ollama create {_ollama_name(out, model.model_id)} -f {out / 'Modelfile'}"
    return summary


def _ollama_name(out: Path, model_id: str) -> str:
    """The model name the export chose for Ollama (tt-export.json gguf.ollama_name), else the folder's name."""
    try:
        info = json.loads((out / "tt-export.json").read_text(encoding="utf-8"))
        return str((info.get("gguf") or {}).get("ollama_name") or out.name)
    except (OSError, json.JSONDecodeError, AttributeError):
        return out.name


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
