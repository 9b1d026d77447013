"""`artifact-manifest.json`: the one writer and the one verifier (docs/protocol.md, Manifest).

`write_manifest` lists every file of a model folder (size, sha256) with the engine's fields;
`verify` checks a folder against its manifest: every listed file has its size and sha256, no file
is unlisted, at least one file inside the folder is listed.

Every listed path must name a file inside the model folder: a relative POSIX
path without `..`, `.` or empty parts, no backslash, and no symlink on the way
that leads out of the folder. Entries that break this are refused (reported,
never opened or hashed), and a manifest whose shape is wrong (not an object,
`files` not a list, an entry without a string `path`, an integer `size` and a
64-hex `sha256`) is a clear problem naming the entry, not a traceback.
Used by the host (tt_host.models.registry) and the engines; stdlib only.
"""

from __future__ import annotations

import datetime
import json
import re
from pathlib import Path
from typing import Any, Collection, Mapping, Optional

from tt_stagekit.files import atomic_write_json, file_sha256

MANIFEST = "artifact-manifest.json"
SHA256 = re.compile(r"[0-9a-f]{64}")


def entry_problem(folder: Path, entry: Any, index: int) -> tuple[str, str] | None:
    """(what, why) when entry `index` of `files` is unusable; None when it names a file inside `folder`."""
    where = f"files[{index}]"
    if not isinstance(entry, dict):
        return where, "must be an object with path, size and sha256"
    rel = entry.get("path")
    if not isinstance(rel, str) or not rel:
        return where, "has no path"
    if rel.startswith("/") or "\\" in rel or "\x00" in rel or re.match(r"[A-Za-z]:", rel):
        return rel, "absolute path refused: a manifest lists files inside the model folder only"
    if any(part in ("", ".", "..") for part in rel.split("/")):
        return rel, "path refused: `..`, `.` and empty parts would leave the model folder"
    size = entry.get("size")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        return rel, f"size must be a non-negative integer, not {size!r}"
    if not isinstance(entry.get("sha256"), str) or not SHA256.fullmatch(entry["sha256"]):
        return rel, "sha256 must be 64 lower-case hex digits"
    root = Path(folder).resolve()
    if root not in (Path(folder) / rel).resolve().parents:
        return rel, "resolves outside the model folder (a symlink); refused"
    return None


def file_entries(folder: Path, manifest: Any) -> tuple[list[dict[str, Any]], list[tuple[str, str]]]:
    """The manifest's usable file entries and the (what, why) problems of the rest and of its shape."""
    if not isinstance(manifest, dict):
        return [], [(MANIFEST, "must be a JSON object with a `files` list")]
    files = manifest.get("files", [])
    if not isinstance(files, list):
        return [], [(MANIFEST, "`files` must be a list")]
    usable, problems = [], []
    for index, entry in enumerate(files):
        problem = entry_problem(folder, entry, index)
        if problem:
            problems.append(problem)
        else:
            usable.append(entry)
    return usable, problems


def folder_files(folder: str | Path, skip_dirs: Collection[str] = ()) -> list[dict[str, Any]]:
    """Every regular file under `folder` but the manifest (sorted POSIX paths) with size and sha256;
    files inside a folder named in `skip_dirs` (at any depth) are left out."""
    folder = Path(folder)
    files = []
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if any(part in skip_dirs for part in rel.parts[:-1]) or not path.is_file() or rel.as_posix() == MANIFEST:
            continue
        files.append({"path": rel.as_posix(), "size": path.stat().st_size, "sha256": file_sha256(path)})
    return files


def write_manifest(folder: str | Path, kind: str, engine: str, *, fields: Optional[Mapping[str, Any]] = None,
                   extra: Optional[Mapping[str, Any]] = None,
                   files: Optional[list[dict[str, Any]]] = None) -> dict[str, Any]:
    """Write `folder`/artifact-manifest.json atomically and return it.

    Keys in this order: format, kind, engine, files (default: `folder_files(folder)`), `fields`, created
    (UTC, seconds), then `extra` (a key already there keeps its place and takes extra's value).
    """
    folder = Path(folder)
    manifest: dict[str, Any] = {"format": 1, "kind": kind, "engine": engine,
                                "files": folder_files(folder) if files is None else files, **(fields or {}),
                                "created": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    manifest.update(extra or {})
    atomic_write_json(folder / MANIFEST, manifest)
    return manifest


def verify(folder: str | Path) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """(the manifest, the (what, why) problems): empty problems when the folder is what its manifest lists.

    A manifest that cannot be read gives ({}, [its problem]); one that is not an object gives ({}, problems).
    """
    folder = Path(folder)
    manifest_path = folder / MANIFEST
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}, [(str(manifest_path), "missing manifest")]
    except json.JSONDecodeError as exc:
        return {}, [(str(manifest_path), f"invalid JSON: {exc.msg} (line {exc.lineno})")]
    except (OSError, UnicodeDecodeError, RecursionError, ValueError) as exc:
        return {}, [(str(manifest_path), f"unreadable: {exc}")]
    entries, problems = file_entries(folder, manifest)
    if not isinstance(manifest, dict):
        return {}, problems
    listed = set()
    for entry in entries:
        rel = entry["path"]
        listed.add(rel)
        target = folder / rel
        if not target.is_file():
            problems.append((rel, "missing"))
        elif target.stat().st_size != entry["size"]:
            problems.append((rel, f"size {target.stat().st_size} != recorded {entry['size']}"))
        elif (actual := file_sha256(target)) != entry["sha256"]:
            problems.append((rel, f"sha256 differs from the manifest (the file was changed): {actual}, "
                                  f"recorded {entry['sha256']}"))
    for file in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = file.relative_to(folder).as_posix()
        if rel != MANIFEST and rel not in listed:
            problems.append((rel, "not listed in the manifest"))
    if not entries:
        problems.append((MANIFEST, "lists no files inside the model folder"))
    return manifest, problems
