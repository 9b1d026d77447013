"""Which pretraining or SFT checkpoint a run resumes from: `verify` one folder, `choose_resume` among them.

A checkpoint (folder.py) is intact when its metadata says `complete: true` and lists every file with the size
and sha256 it has; a step whose metadata lacks `complete` is passed over like a damaged one. Metadata of format 1,
written by a tt from before `complete` was recorded, is accepted when every file matches its size and sha256 (the
atomic rename was then the only mark of a finished save, and the digests prove the files are the ones written),
so a run upgraded mid-training resumes from its checkpoints; the choice says so. The newest intact one with the
run's configuration fingerprint is chosen, local before backup; damaged ones are passed over with a note; one
written with another configuration is refused before anything changes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional

from tt_stagekit.contract import InvalidInput, StageError
from tt_stagekit.files import file_sha256

from tt_engine_foundation.runtime.checkpoints.folder import FILES, list_steps


def verify(path: Path) -> tuple[bool, str, Optional[dict[str, Any]]]:
    """(intact, reason, metadata). Checks the metadata and every file's size and sha256."""
    meta_path = path / "metadata.json"
    try:
        metadata = json.loads(meta_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return False, "metadata.json is missing", None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return False, f"metadata.json is unreadable ({exc})", None
    if not isinstance(metadata, dict) or not isinstance(metadata.get("files"), list):
        return False, "metadata.json has no file list", None
    legacy = metadata.get("format") == 1 and "complete" not in metadata
    if not legacy and metadata.get("complete") is not True:
        return False, "metadata.json does not say `complete: true` (the save never finished)", None
    listed = {f.get("path") for f in metadata["files"]}
    for required in FILES:
        if required not in listed:
            return False, f"metadata does not list {required}", None
    for entry in metadata["files"]:
        file_path = path / entry["path"]
        if not file_path.is_file():
            return False, f"{entry['path']} is missing", None
        size = file_path.stat().st_size
        if size != entry["size"]:
            return False, f"{entry['path']} is {size} bytes, expected {entry['size']} (truncated?)", None
        if file_sha256(file_path) != entry["sha256"]:
            return False, f"{entry['path']} does not match its sha256 (corrupted)", None
    return True, LEGACY if legacy else "intact", metadata


LEGACY = "intact: written by an older tt, without `complete` in its metadata; every file matches its sha256"


@dataclass
class ResumeChoice:
    path: Optional[Path]
    notes: list[str]
    metadata: Optional[dict[str, Any]] = None


def _differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    keys = sorted(set(old) | set(new))
    return [k for k in keys if old.get(k) != new.get(k)]


def choose_resume(
    local: Path, backup_dir: Optional[Path], fingerprint: str, config: Mapping[str, Any]
) -> ResumeChoice:
    """Pick the newest intact checkpoint whose fingerprint matches, local before backup.

    Raises InvalidInput when an intact checkpoint was made with another config
    (before anything changes on disk), StageError when checkpoints exist but
    none is intact. Returns path None when there is nothing to resume.
    """
    candidates: list[tuple[int, int, Path]] = []
    for step, path in list_steps(local):
        candidates.append((step, 1, path))
    for step, path in list_steps(backup_dir):
        candidates.append((step, 0, path))
    candidates.sort(reverse=True)
    notes: list[str] = []
    chosen: Optional[tuple[Path, dict, str]] = None
    for step, _, path in candidates:
        ok, reason, metadata = verify(path)
        if not ok:
            notes.append(f"checkpoint {path} is not usable: {reason}; trying an older one")
            continue
        assert metadata is not None
        if metadata.get("config_fingerprint") != fingerprint:
            changed = _differences(metadata.get("config", {}), config)
            raise InvalidInput(
                f"the pretraining configuration changed since checkpoint {path} was written "
                f"(changed: {', '.join(changed) or 'fingerprint'}); this run directory cannot continue "
                "with the new settings: use a new run directory (nothing was changed)"
            )
        if chosen is None:
            chosen = (path, metadata, reason)
    if chosen is None:
        if candidates:
            raise StageError(
                "no intact pretraining checkpoint to resume from ("
                + "; ".join(notes)
                + "); nothing was deleted: restore a checkpoint or use a new run directory"
            )
        return ResumeChoice(None, notes)
    path, metadata, reason = chosen
    if reason == LEGACY:
        notes.append(f"checkpoint {path} is {reason}, so it is resumed from")
    if notes:
        notes.append(f"resuming from {path} (step {metadata['step']})")
    return ResumeChoice(path, notes, metadata)
