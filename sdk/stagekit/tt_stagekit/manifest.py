"""Reading an `artifact-manifest.json`'s file list safely (docs/protocol.md, Artifacts).

Every listed path must name a file inside the model folder: a relative POSIX
path without `..`, `.` or empty parts, no backslash, and no symlink on the way
that leads out of the folder. Entries that break this are refused (reported,
never opened or hashed), and a manifest whose shape is wrong (not an object,
`files` not a list, an entry without a string `path`, an integer `size` and a
64-hex `sha256`) is a clear problem naming the entry, not a traceback.
Used by the host (tt_host.models.registry) and the engines; stdlib only.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

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
        return [], [("artifact-manifest.json", "must be a JSON object with a `files` list")]
    files = manifest.get("files", [])
    if not isinstance(files, list):
        return [], [("artifact-manifest.json", "`files` must be a list")]
    usable, problems = [], []
    for index, entry in enumerate(files):
        problem = entry_problem(folder, entry, index)
        if problem:
            problems.append(problem)
        else:
            usable.append(entry)
    return usable, problems
