"""Write and verify `artifact-manifest.json` (docs/protocol.md)."""

from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path
from typing import Any, Mapping, Optional

from tt_engine_adapter import fingerprint
from tt_stagekit.manifest import file_entries
from tt_stagekit.protocol import atomic_write_json

MANIFEST = "artifact-manifest.json"


def write_manifest(
    folder: str | Path,
    kind: str,
    base_model: Mapping[str, Any],
    system_message_sha256: str,
    extra: Optional[Mapping[str, Any]] = None,
) -> dict[str, Any]:
    """List every file of `folder` (but the manifest) with size and sha256, atomically."""
    folder = Path(folder)
    files = [f for f in fingerprint.folder_files(folder) if f["path"] != MANIFEST]
    manifest = {
        "format": 1,
        "kind": kind,
        "engine": "adapter",
        "files": files,
        "system_message_sha256": system_message_sha256,
        "base_model": {
            "name": base_model.get("name"),
            "revision": base_model.get("revision"),  # the commit, for a hub id
            "requested_revision": base_model.get("requested_revision"),  # the spec's commit, branch or tag
            "fingerprint": base_model.get("fingerprint"),
        },
        "created": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    if extra:
        manifest.update(extra)
    atomic_write_json(folder / MANIFEST, manifest)
    return manifest


def verify_manifest(folder: str | Path) -> list[str]:
    """Problems found (empty when every listed file has its recorded size and sha256)."""
    folder = Path(folder)
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError, RecursionError) as exc:
        return [f"{folder / MANIFEST}: {exc}"]
    entries, refused = file_entries(folder, manifest)  # paths outside the folder are refused, never hashed
    problems = [f"{what}: {why}" for what, why in refused]
    for entry in entries:
        path = folder / entry["path"]
        if not path.is_file():
            problems.append(f"{entry['path']}: missing")
        elif path.stat().st_size != entry["size"]:
            problems.append(f"{entry['path']}: size changed")
        elif fingerprint.sha256_file(path) != entry["sha256"]:
            problems.append(f"{entry['path']}: sha256 changed")
    return problems
