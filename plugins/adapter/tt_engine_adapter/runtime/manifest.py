"""The adapter's `artifact-manifest.json` (docs/protocol.md): its fields, written and verified by tt_stagekit.manifest."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional

from tt_engine_adapter.formats import fingerprint
from tt_stagekit.manifest import MANIFEST, folder_files, verify
from tt_stagekit.manifest import write_manifest as _write

__all__ = ["MANIFEST", "verify_manifest", "write_manifest"]


def write_manifest(
    folder: str | Path,
    kind: str,
    base_model: Mapping[str, Any],
    system_message_sha256: str,
    extra: Optional[Mapping[str, Any]] = None,
) -> dict[str, Any]:
    """List every file of `folder` (but the manifest) with size and sha256, atomically."""
    return _write(folder, kind, "adapter", files=folder_files(folder, fingerprint.IGNORED_DIRS), extra=extra, fields={
        "system_message_sha256": system_message_sha256,
        "base_model": {
            "name": base_model.get("name"),
            "revision": base_model.get("revision"),  # the commit, for a hub id
            "requested_revision": base_model.get("requested_revision"),  # the spec's commit, branch or tag
            "fingerprint": base_model.get("fingerprint"),
        },
    })


def verify_manifest(folder: str | Path) -> list[str]:
    """Problems found, as `what: why` (empty when the folder is what its manifest lists)."""
    return [f"{what}: {why}" for what, why in verify(folder)[1]]
