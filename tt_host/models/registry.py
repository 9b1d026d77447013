"""The model registry: verified artifacts (trained weights, exported models) that runs produced.

A model is a directory holding `artifact-manifest.json` (docs/protocol.md). It
is registered as soon as it verifies, so a later failure in the run does not
lose it. Registry entries live in `$TT_HOME/models/<id>.json` (TT_HOME defaults
to `$XDG_DATA_HOME/tt`, else `~/.local/share/tt`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from tt_stagekit.manifest import MANIFEST, verify  # noqa: F401 (MANIFEST: the host's name for it)

from tt_host import ids
from tt_host.errors import CorruptRecord
from tt_host.models import versions
from tt_host.fsutil import FileLock, make_private_dir, sha256_file, write_json_atomic


def tt_home() -> Path:
    if os.environ.get("TT_HOME"):
        return Path(os.environ["TT_HOME"]).expanduser().absolute()
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data).expanduser().absolute() / "tt"


def registry_dir() -> Path:
    return tt_home() / "models"


class VerifyError(RuntimeError):
    pass


@dataclass
class Problem:
    file: str
    reason: str

    def __str__(self) -> str:
        return f"{self.file}: {self.reason}"


def verify_artifact(path: Path) -> tuple[dict[str, Any], list[Problem]]:
    """Check every file in the manifest (size, sha256) and that no unlisted file appeared. Listed paths must stay
    inside the folder (absolute and `..` entries are refused, never hashed); a malformed manifest is a problem."""
    manifest, problems = verify(path)  # tt_stagekit.manifest: the one verifier, shared with the engines
    return manifest, [Problem(what, why) for what, why in problems]


def slug(text: str) -> str:
    return ids.part(text) or "model"


def model_id_for(spec_name: str, run_id: str, kind: str) -> str:
    """`<spec>-<run>-<kind>`, each part reduced to safe characters (a run folder named `My Run` gives `my-run`)."""
    return f"{slug(spec_name)}-{ids.part(run_id, 80) or 'run'}-{slug(kind)}"


REGISTRY_LOCK = ".registry.lock"  # in the registry folder: the one lock of every change to the registry


def registry_lock(doing: str) -> FileLock:
    """The registry's one lock (blocking when used as a context manager): registration, `tt models gc`,
    activation and rollback each hold it from their first read to their last write, so none of them writes
    an entry or a history record from a state another changed meanwhile (a registration racing gc never
    loses its version; an activation never records a version gc just removed). Never taken twice by one
    process at once (a second flock on another descriptor would wait for the first forever)."""
    make_private_dir(registry_dir())
    return FileLock(registry_dir() / REGISTRY_LOCK, holder=f"pid {os.getpid()} {doing}")


def register(path: Path, **fields: Any) -> dict[str, Any]:
    """`_register` under the registry's lock, so concurrent registrations of one id (two runs, two processes)
    each get their own id and entry, and gc never rewrites an entry a registration is changing."""
    with registry_lock(f"registering {path}"):
        return _register(path, **fields)


def _register(path: Path, *, run_id: str, run_dir: Path, spec_name: str, engine: str, kind: str,
              spec_id: Optional[str] = None, system_message: Optional[str] = None) -> dict[str, Any]:
    """Register the artifact in `path` under its id: a new version (tt_host.models.versions) when its manifest
    differs from the latest version's, whose files are copied so they never change under it."""
    manifest, problems = verify_artifact(path)
    if problems:
        raise VerifyError(f"artifact {path} failed verification: " + "; ".join(map(str, problems)))
    model_id = _free_id(model_id_for(spec_name, run_id, kind), Path(path).absolute())
    entry = {
        "id": model_id,
        "kind": kind,
        "engine": engine,
        "path": str(Path(path).absolute()),
        "run_dir": str(Path(run_dir).absolute()),
        "spec_name": spec_name,
        "system_message_sha256": manifest.get("system_message_sha256"),
        "base_model": manifest.get("base_model"),
        "manifest_sha256": sha256_file(Path(path) / MANIFEST),
    }
    if spec_id is not None:  # a Node spec's `id` (tt_host.spec.legacy)
        entry["spec_id"] = spec_id
    make_private_dir(registry_dir())
    entry = versions.add_version(get_model(model_id), entry, manifest, Path(path).absolute(), system_message,
                                 registry_dir() / versions.VERSIONS_FOLDER)
    _, problems = verify_artifact(Path(entry["path"]))
    if problems:  # the folder changed while it was copied
        raise VerifyError(f"artifact {path} changed while it was registered: " + "; ".join(map(str, problems)))
    write_json_atomic(entry_file(model_id), entry)
    return entry


def entry_file(model_id: str) -> Path:
    """Where the entry of a (safe) model id lives."""
    return registry_dir() / f"{model_id}.json"


def _free_id(base: str, path: Path) -> str:
    """`base`, or `base-2`, `base-3`, ... : the first id that is free or already names this same folder,
    so a second artifact of one kind in a run never replaces the first's entry, and re-registering a
    folder keeps its id."""
    number = 1
    while True:
        candidate = base if number == 1 else f"{base}-{number}"
        try:
            existing = get_model(candidate)
        except (OSError, ValueError):  # an unreadable entry is never overwritten
            existing = {}
        if existing is None or existing.get("source_path", existing.get("path")) == str(path):
            return candidate
        number += 1


def read_entry(file: Path) -> dict[str, Any]:
    """One registry entry file; CorruptRecord naming it when it is not an entry (never skipped silently)."""
    remedy = (f"move it out of {registry_dir()} (its model is then unregistered) or restore it from a backup; "
              "re-running the run registers its models again")
    try:
        entry = json.loads(Path(file).read_bytes().decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # not UTF-8, not JSON, nested beyond the parser
        raise CorruptRecord(file, f"not a JSON registry entry ({exc})", remedy) from None
    if not isinstance(entry, dict) or not isinstance(entry.get("id"), str) or not isinstance(entry.get("path"), str):
        raise CorruptRecord(file, "not a registry entry (an object with a string id and path)", remedy)
    return entry


def list_models(problems: Optional[list[str]] = None) -> list[dict[str, Any]]:
    """Every registry entry. A corrupt one raises CorruptRecord, or is named in `problems` when a list is given."""
    root = registry_dir()
    if not root.is_dir():
        return []
    models = []
    for file in sorted(root.glob("*.json")):
        try:
            models.append(read_entry(file))
        except CorruptRecord as exc:
            if problems is None:
                raise
            problems.append(str(exc))
    return models


def get_model(model_id: str) -> Optional[dict[str, Any]]:
    """The registry entry of `model_id`. A safe id names its file; an id an older tt registered with other
    characters (`e-My Run-echo`) is found by reading the entries, never by building a path from it."""
    if not isinstance(model_id, str) or not model_id:
        return None
    if not ids.is_model_id(model_id):
        return next((entry for entry in list_models() if entry["id"] == model_id), None)
    file = registry_dir() / f"{model_id}.json"
    if not file.is_file():
        return None
    entry = read_entry(file)
    return entry if entry.get("id") == model_id else None


def get_version(reference: str) -> Optional[dict[str, Any]]:
    """The entry of `id` (its latest version) or `id@n` (that version: tt_host.models.versions.at_version),
    or None for an unknown id. Raises versions.VersionError for a version it does not have."""
    model_id, number = versions.split_reference(reference)
    entry = get_model(reference) if number is None else (get_model(reference) or get_model(model_id))
    if entry is None:
        return None
    return versions.at_version(entry, None if entry["id"] == reference else number)


def verify_model(model_id: str) -> tuple[dict[str, Any], list[Problem]]:
    """(the entry as of the version `model_id` names, its problems); LookupError for an unknown model."""
    entry = get_version(model_id)
    if entry is None:
        raise LookupError(f"no registered model {model_id!r}; see `tt models list`")
    _, problems = verify_artifact(Path(entry["path"]))
    manifest_path = Path(entry["path"]) / MANIFEST
    if manifest_path.is_file() and sha256_file(manifest_path) != entry.get("manifest_sha256"):
        problems.insert(0, Problem(MANIFEST, "the manifest itself changed since registration"))
    return entry, problems
