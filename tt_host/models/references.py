"""Resolving a MODEL argument (`tt models export`, `tt serve`) to a verified model on disk.

MODEL may be:

- a registered model id (`tt models list`);
- `active` / `base`: the active model and its base (`tt models activate`);
- a run directory: its registered model of the best kind its engine declares
  (`Engine.model_kinds`, best first); when this TT_HOME registered none (a run
  folder from elsewhere), the model its last completed stage declared in
  result.json (a later stage's model before an earlier one's), else the
  kind's declared folder;
- a model folder: one a run wrote, one written by `tt models export`, or any
  Hugging Face model folder.

Every folder with an `artifact-manifest.json` is verified (sizes and sha256)
before use; its manifest `kind` is looked up among the installed engines'
`ModelKind`s, which say how it is served and exported. The spec's system
message comes from the kind's `info_file` or from the run's frozen
`spec.json` (recompiled, and checked against the sha256 the manifest
recorded). Nothing here imports torch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional

from tt_host.errors import TTError, did_you_mean
from tt_host.engine import SERVE_HF, SERVE_ON_BASE, Engine, ModelKind
from tt_host.models import activation, registry, versions
from tt_host.spec.compiler import compile_system_message, sha256_text
from tt_stagekit.contract import StageResult
from tt_stagekit.userinput import InputFileError, read_regular


class ModelRefError(TTError):
    """MODEL cannot be used; exit_code 2 (bad argument) or 1 (a model that fails verification)."""

    exit_code = 2


@dataclass
class ResolvedModel:
    """A verified model: its folder, id, kind, engine, how it is served, its run and its system message."""

    form: str  # how it is served: tt_host.engine.SERVE_EXPORT, SERVE_ON_BASE, SERVE_HF or SERVE_OWN
    path: Path
    model_id: str
    kind: str
    engine: Optional[str] = None
    run_dir: Optional[Path] = None
    base_model_path: Optional[Path] = None
    system_message: Optional[str] = None
    system_message_sha256: Optional[str] = None
    manifest: dict[str, Any] = field(default_factory=dict)
    model_kind: Optional[ModelKind] = None  # as its engine declares it (None: a plain Hugging Face folder)


MAX_INFO_BYTES = 16 << 20  # a model folder's small JSON files (its kind's info_file, a run's spec.json)


def _read_json(path: Path) -> Optional[dict[str, Any]]:
    """The JSON object in `path`; None when there is none or it is not one. A FIFO, device or oversized file (a
    link to /dev/zero planted as an unlisted info file) is a ModelRefError naming it, never read."""
    try:
        data = json.loads(read_regular(path, MAX_INFO_BYTES).decode("utf-8"))
    except InputFileError as exc:
        if exc.missing:
            return None
        raise ModelRefError(f"{exc}; a model folder's JSON files are small regular files") from None
    except (ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def _verified_manifest(path: Path) -> dict[str, Any]:
    manifest, problems = registry.verify_artifact(path)
    if problems:
        raise ModelRefError(f"{path} failed verification: " + "; ".join(map(str, problems)), exit_code=1)
    return manifest


def spec_system_message(run_dir: Path) -> Optional[str]:
    """The compiled system message of a run's frozen spec.json (None when it has none)."""
    spec = _read_json(run_dir / "spec.json")
    if spec is None:
        return None
    neutral = SimpleNamespace(system_prompt=spec.get("system_prompt") or "", guidelines=spec.get("guidelines") or [],
                              constraints=spec.get("constraints") or [])
    return compile_system_message(neutral)


def _engines() -> dict[str, Engine]:
    from tt_host.plugins import plugins

    return plugins().engines


def declared_kind(kind: str, engine: Optional[str] = None) -> Optional[tuple[Engine, ModelKind]]:
    """The installed engine that declares model kind `kind` (the manifest's own engine first)."""
    engines = _engines()
    ordered = ([engines[engine]] if engine in engines else []) + [e for n, e in sorted(engines.items()) if n != engine]
    for candidate in ordered:
        for model_kind in candidate.model_kinds:
            if model_kind.kind == kind:
                return candidate, model_kind
    return None


def _find_run_dir(path: Path) -> Optional[Path]:
    for candidate in (path.parent, path.parent.parent):
        if (candidate / "run.json").is_file():
            return candidate
    return None


def _registered_for(path: Path) -> Optional[dict[str, Any]]:
    target = str(path.resolve())
    for entry in registry.list_models():
        if str(Path(entry.get("path", "")).resolve()) == target:
            return entry
    return None


def _default_id(run_dir: Optional[Path], kind: str, fallback: str) -> str:
    if run_dir is not None:
        run = _read_json(run_dir / "run.json") or {}
        if run.get("id") and run.get("spec_name"):
            return registry.model_id_for(str(run["spec_name"]), str(run["id"]), kind)  # checked: run.json is input
    return registry.slug(fallback)


def from_folder(path: Path, model_id: Optional[str] = None, registered: Optional[dict[str, Any]] = None) -> ResolvedModel:
    """A model folder (see the module docstring) as a ResolvedModel. `registered`: the registry entry (as of
    its version) when the folder is a registered version's, which lies outside its run folder."""
    path = path.absolute()
    if (path / registry.MANIFEST).is_file():
        manifest = _verified_manifest(path)
        kind = str(manifest.get("kind") or "model")
    elif (path / "config.json").is_file():
        manifest, kind = {}, "hf"
    else:
        raise ModelRefError(f"{path} is not a model folder (no artifact-manifest.json or config.json)")
    run_dir = _find_run_dir(path)
    if registered is not None and registered.get("run_dir") and run_dir is None:
        run_dir = Path(registered["run_dir"])
    entry = registered or _registered_for(path)
    model_id = model_id or (entry or {}).get("id") or _default_id(run_dir, kind, path.name)
    resolved = ResolvedModel(form=SERVE_HF, path=path, model_id=model_id, kind=kind, engine=manifest.get("engine"),
                             run_dir=run_dir, manifest=manifest,
                             system_message_sha256=manifest.get("system_message_sha256") or None)
    declared = declared_kind(kind, manifest.get("engine")) if manifest else None
    if declared is None and manifest and not (path / "config.json").is_file():
        raise ModelRefError(f"{path}: no installed engine declares model kind {kind!r} (made by engine "
                            f"{manifest.get('engine')!r}); install that engine (tt engines install NAME)")
    if declared is not None:
        engine, model_kind = declared
        resolved.form, resolved.model_kind = model_kind.serve, model_kind
        resolved.engine = resolved.engine or engine.name
        info = (_read_json(path / model_kind.info_file) or {}) if model_kind.info_file else {}
        resolved.system_message = info.get("system_message")
        if model_kind.serve == SERVE_ON_BASE:
            base = (info.get("base_model") or {}).get("path")
            if not base or not (Path(base) / "config.json").is_file():
                raise ModelRefError(f"{path}: the base model {base!r} it is trained on is not available; "
                                    "restore it first")
            resolved.base_model_path = Path(base)
        if model_kind.folder is None and info.get("model_id"):  # an export keeps its source's id
            resolved.model_id = model_id if entry else (info.get("model_id") or model_id)
    if resolved.system_message is None and registered is not None:  # kept with the version when it was registered
        resolved.system_message = registered.get("system_message")
    if resolved.system_message is None and run_dir is not None and resolved.system_message_sha256:
        resolved.system_message = spec_system_message(run_dir)
    if resolved.system_message is not None and resolved.system_message_sha256 and \
            sha256_text(resolved.system_message) != resolved.system_message_sha256:
        raise ModelRefError(f"{path}: the spec's system message no longer matches the sha256 recorded with the model "
                            "(spec.json changed?); use --no-spec-prompt to serve without it", exit_code=1)
    return resolved


def from_run_dir(run_dir: Path) -> ResolvedModel:
    run_dir = run_dir.absolute()
    run = _read_json(run_dir / "run.json") or {}
    entries = [e for e in registry.list_models() if Path(e.get("run_dir", "")).absolute() == run_dir]
    by_kind = {e.get("kind"): e for e in entries}
    engines = _engines()
    ordered = [engines[run["engine"]]] if run.get("engine") in engines else list(engines.values())
    kinds = [k for engine in ordered for k in engine.model_kinds if k.folder]
    for model_kind in kinds:
        if model_kind.kind in by_kind:
            return resolve_registered(by_kind[model_kind.kind]["id"])
    # Not registered here (another TT_HOME?): the model the last completed stage declared (a later stage's model
    # supersedes an earlier one's), else the folders the engine declares for its kinds.
    stages = run.get("stages") if isinstance(run.get("stages"), dict) else {}
    declared = _last_declared_model(run_dir, stages, [k.kind for k in kinds])
    if declared is not None:
        return from_folder(declared)
    for model_kind in kinds:
        folder = run_dir / model_kind.folder
        stage = Path(model_kind.folder).parts[0]
        if folder.is_dir() and (stages.get(stage) or {}).get("state") == "completed":
            return from_folder(folder)
    raise ModelRefError(f"{run_dir}: the run has no finished model yet (status {run.get('status', 'unknown')})")


def _last_declared_model(run_dir: Path, stages: dict[str, Any], kinds: list[str]) -> Optional[Path]:
    """The folder of the model (a kind in `kinds`) that the last completed stage's result.json declares among its
    artifacts, when it lies inside the run directory (a run folder someone shared is data: a stage name or an
    artifact path never leads out of it); None when no completed stage declares one."""
    for name, record in reversed(list(stages.items())):
        if not isinstance(record, dict) or record.get("state") != "completed" or \
                not isinstance(name, str) or Path(name).name != name or name in ("", ".", ".."):
            continue
        result = _read_json(run_dir / name / "result.json")
        try:
            artifacts = StageResult.from_json(result).artifacts if result is not None else ()
        except (KeyError, TypeError, AttributeError, ValueError):
            continue
        for artifact in artifacts:
            folder = Path(artifact.path) if Path(artifact.path).is_absolute() else run_dir / artifact.path
            if artifact.kind in kinds and folder.resolve().is_relative_to(run_dir.resolve()) and folder.is_dir():
                return folder
    return None


def registered_id(reference: str) -> str:
    """A registered model's id from the id itself or its unique prefix (tt_host.models.prefixes), either
    followed by `@n` (`capitals-2026@2`: the one id the prefix begins, version 2); `reference` unchanged when
    nothing matches, so the caller's "no registered model" names what was given. An ambiguous prefix raises
    AmbiguousPrefix (exit 2) listing the ids it begins; a version not in ASCII digits, VersionError (exit 2)."""
    from tt_host.models import prefixes

    if registry.get_model(reference) is not None:
        return reference
    name, number = versions.split_reference(reference)
    if number is not None and registry.get_model(name) is not None:
        return reference
    picked = prefixes.pick(name, (entry["id"] for entry in registry.list_models()), "model")
    if picked is None:
        return reference
    return picked if number is None else f"{picked}@{number}"


def resolve_registered(model_id: str) -> ResolvedModel:
    """A registered model (its id, unique prefix or `ID@n`) as a ResolvedModel; ModelRefError when there is none."""
    model_id = registered_id(model_id)
    try:
        entry = registry.get_version(model_id)
    except versions.VersionError as exc:
        raise ModelRefError(str(exc)) from None
    if entry is None:
        meant = did_you_mean(model_id, (e["id"] for e in registry.list_models()))
        raise ModelRefError(f"no registered model {model_id!r} and no such folder; "
                            + (f"did you mean {meant!r}?" if meant else "see `tt models list`"))
    _, problems = registry.verify_model(model_id)
    if problems:
        raise ModelRefError(f"model {model_id} failed verification: " + "; ".join(map(str, problems)), exit_code=1)
    return from_folder(Path(entry["path"]), model_id=entry["id"], registered=entry)


def resolve(reference: str) -> ResolvedModel:
    """MODEL as given on the command line (`active` and `base`: see tt_host.models.activation)."""
    path = Path(reference).expanduser()
    if reference in ("active", "base") and not path.exists():
        return resolve_active() if reference == "active" else resolve_base()
    if path.is_dir():
        if (path / "run.json").is_file():
            return from_run_dir(path)
        return from_folder(path)
    if path.exists():
        raise ModelRefError(f"{path} is a file; give a model id, a run directory or a model folder")
    return resolve_registered(reference)


def resolve_active() -> ResolvedModel:
    """The active model as a ResolvedModel (`tt serve active`); the base model after a rollback to it."""
    state = activation.current()
    if state["model"] is not None:
        try:
            activation.check_active(state)
        except activation.ActivationError as exc:
            raise ModelRefError(str(exc), exit_code=1) from None
        return resolve_registered(activation.active_reference(state))
    if state["base_of"] is not None:
        return resolve_base()
    raise ModelRefError("no model is active; activate one with `tt models activate ID` (see `tt models list`)")


def resolve_base() -> ResolvedModel:
    """The base model under the active model (or under the one last rolled back from), served with the same
    spec system message, so base and tuned answer the same prompts (`tt serve base`)."""
    state = activation.current()
    anchor = state["model"] or state["base_of"]
    if anchor is None:
        raise ModelRefError("no model has been activated, so there is no base model to pick; "
                            "activate one with `tt models activate ID`")
    tuned = resolve_registered(anchor)
    if tuned.form == SERVE_ON_BASE and tuned.base_model_path is not None:
        base = from_folder(tuned.base_model_path, model_id=f"{anchor}-base")
    else:
        entry = registry.get_model(anchor) or {}
        base_kinds = {kind.kind for engine in _engines().values() for kind in engine.model_kinds if kind.base}
        pretrained = [e for e in registry.list_models()
                      if e.get("run_dir") == entry.get("run_dir") and e.get("kind") in base_kinds]
        if not pretrained or pretrained[0]["id"] == anchor:
            raise ModelRefError(f"{anchor} has no base model recorded (kind {tuned.kind}); serve a model id instead")
        base = resolve_registered(pretrained[0]["id"])
    base.system_message, base.system_message_sha256 = tuned.system_message, tuned.system_message_sha256
    return base
