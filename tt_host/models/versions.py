"""Model versions: a registered model keeps its id and lists versions, and a version never changes.

A model's entry (`$TT_HOME/models/<id>.json`, tt_host.models.registry) names the model; every artifact
registered under that id with a manifest of other bytes (a resumed run that trained again) is a new version
(1, 2, ...). A version's files are copied at registration into `$TT_HOME/models/versions/<id>/<n>/`
(a reflink where the filesystem has them, else a plain copy), so later runs, re-runs or edits of the
run folder never touch them: the entry's `path` is the latest version's folder, `source_path` the run's
artifact folder it came from. `id@n` names one version (`tt models activate ID@2`, `tt serve ID@2`).

`tt models gc` (tt_host.models.gc) removes the folders of versions nothing points at: not the latest version of a model, not any version
in the activation stack (the active one and those a rollback returns to). Their records stay, marked
`removed`. A copy is made in `.<n>.partial-<pid>/` and renamed into place; one a killed process left behind
is removed by the next registration of that id and by gc (`remove_stale_partials`), never one whose process is
alive. An entry registered before versions existed reads as one version whose files are its `path`
(the run folder, which gc never removes).
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import time
import unicodedata
from pathlib import Path
from typing import Any, Iterable, Optional

from tt_stagekit.files import fsync_dir
from tt_stagekit.manifest import MANIFEST

from tt_host.errors import TTError

VERSIONS_FOLDER = "versions"
FICLONE = 0x40049409  # linux/fs.h: share the source's blocks copy-on-write


class VersionError(TTError, LookupError):
    """No such version of a registered model, or a version reference that is not one (exit 2)."""

    exit_code = 2


VERSION = re.compile(r"[1-9][0-9]*")  # ASCII digits only: `str.isdigit` takes `²` (int() then fails) and `٣` (3)


def split_reference(reference: str) -> tuple[str, Optional[int]]:
    """`id@n` -> (id, n); a reference with no `@` (or nothing after it that looks like a number) -> (reference,
    None). A number that is not ASCII digits from 1 (`ID@²`, `ID@٣`, `ID@0`, `ID@01`) raises VersionError naming
    the reference, never a traceback or another version."""
    name, at, number = reference.rpartition("@")
    if not (at and name and number):
        return reference, None
    if VERSION.fullmatch(number):
        return name, int(number)
    if any(unicodedata.numeric(char, None) is not None for char in number):
        raise VersionError(f"{reference!r}: a version is written in ASCII digits from 1 ({name}@2); see "
                           f"`tt models history {name}`")
    return reference, None


def versions_of(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """The entry's versions, oldest first (one, from the entry itself, for an entry older than versions)."""
    listed = entry.get("versions")
    if isinstance(listed, list) and listed:
        return [v for v in listed if isinstance(v, dict) and isinstance(v.get("version"), int)]
    return [{"version": 1, "path": entry.get("path"), "manifest_sha256": entry.get("manifest_sha256"),
             "system_message_sha256": entry.get("system_message_sha256"), "legacy": True}]


def at_version(entry: dict[str, Any], version: Optional[int]) -> dict[str, Any]:
    """The entry as of `version` (None: the latest): its path, manifest and system message digests are the
    version's. Raises VersionError for a version the entry does not list or whose files gc removed."""
    versions = versions_of(entry)
    chosen = versions[-1] if version is None else next((v for v in versions if v["version"] == version), None)
    if chosen is None:
        numbers = ", ".join(str(v["version"]) for v in versions)
        raise VersionError(f"model {entry['id']} has no version {version} (versions: {numbers}); see "
                           f"`tt models history {entry['id']}`")
    if chosen.get("removed"):
        raise VersionError(f"version {chosen['version']} of model {entry['id']} was removed by `tt models gc` "
                           f"on {chosen['removed']}")
    flat = {key: value for key, value in entry.items() if key != "versions"}
    flat.update({key: chosen[key] for key in ("path", "manifest_sha256", "system_message_sha256", "system_message",
                                              "run_dir") if chosen.get(key) is not None})
    flat["version"] = chosen["version"]
    return flat


def _clone_or_copy(source: Path, target: Path) -> None:
    with open(source, "rb") as src, open(target, "xb") as dst:
        try:
            fcntl.ioctl(dst.fileno(), FICLONE, src.fileno())
        except OSError:
            shutil.copyfileobj(src, dst, 1 << 20)
        os.fsync(dst.fileno())
    shutil.copystat(source, target)


def snapshot(source: Path, manifest: dict[str, Any], target: Path) -> None:
    """Copy the manifest and every file it lists from `source` into the new folder `target` (made whole under
    a temporary name, then renamed: a half-copied version is never seen)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.parent / f".{target.name}{PARTIAL}{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(mode=0o700)
    try:
        for rel in [MANIFEST] + [f["path"] for f in manifest.get("files", [])]:
            (partial / rel).parent.mkdir(parents=True, exist_ok=True)
            _clone_or_copy(source / rel, partial / rel)
        os.rename(partial, target)
        fsync_dir(target.parent)  # the rename itself durable (each file was fsynced as it was copied)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise


PARTIAL = ".partial-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def remove_stale_partials(folders: Iterable[Path], dry_run: bool = False) -> list[Path]:
    """Remove (or with dry_run only list) each `.<n>.partial-<pid>` copy in `folders` (a model's versions folders)
    whose process is gone: a kill mid-copy leaves one; a live process's copy is never touched."""
    stale = []
    for folder in folders:
        try:
            children = list(folder.iterdir())
        except (FileNotFoundError, NotADirectoryError):
            continue
        for child in children:
            _, marker, pid = child.name.rpartition(PARTIAL)
            if (child.name.startswith(".") and marker and pid.isdigit() and child.is_dir()
                    and not child.is_symlink() and not _alive(int(pid))):
                stale.append(child)
                if not dry_run:
                    shutil.rmtree(child, ignore_errors=True)
    return stale


def add_version(existing: Optional[dict[str, Any]], entry: dict[str, Any], manifest: dict[str, Any],
                folder: Path, system_message: Optional[str], root: Path) -> dict[str, Any]:
    """`entry` (a fresh registration of the artifact in `folder`) with the versions of `existing` and, unless
    its latest version has the same manifest, a new version snapshotted under `folder_for(root, ...)`
    (`root`: the registry's `versions` folder)."""
    remove_stale_partials([folder_for(root, entry["id"], 1).parent])
    versions = versions_of(existing) if existing else []
    latest = versions[-1] if versions else None
    if latest is None or latest.get("manifest_sha256") != entry["manifest_sha256"] or latest.get("removed"):
        number = (latest["version"] + 1) if latest else 1
        target = folder_for(root, entry["id"], number)
        if target.exists():  # left by an entry that was deleted by hand: never reused
            shutil.rmtree(target)
        snapshot(folder, manifest, target)
        latest = {"version": number, "path": str(target), "manifest_sha256": entry["manifest_sha256"],
                  "system_message_sha256": entry.get("system_message_sha256"), "system_message": system_message,
                  "run_dir": entry.get("run_dir"), "registered_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        versions.append(latest)
    return {**entry, "path": latest["path"], "source_path": str(folder), "version": latest["version"],
            "versions": versions}


def folder_for(root: Path, model_id: str, version: int) -> Path:
    from tt_host.ids import folder_name

    return root / folder_name(model_id) / str(version)


def pinned(records: Iterable[dict[str, Any]]) -> set[tuple[str, int]]:
    """(model, version) pairs the activation stack holds: the active one and those a rollback returns to (a
    record older than versions means the latest version, which is kept anyway)."""
    stack: list[tuple[str, Optional[int]]] = []
    for record in records:
        if record.get("action") == "activate":
            stack.append((record.get("model"), record.get("version")))
        elif record.get("action") == "rollback" and stack:
            stack.pop()
    return {(model, version) for model, version in stack if isinstance(version, int)}


def collectable(entries: list[dict[str, Any]], records: list[dict[str, Any]]) -> list[tuple[dict, dict]]:
    """(entry, version) for every version whose folder `gc` would remove."""
    keep = pinned(records)
    out = []
    for entry in entries:
        versions = versions_of(entry)
        for version in versions[:-1]:
            if version.get("legacy") or version.get("removed") or (entry["id"], version["version"]) in keep:
                continue
            out.append((entry, version))
    return out

