"""`tt models gc`: remove the files of model versions nothing points at (tt_host.models.versions.collectable).

A version is kept while it is its model's latest or on the activation stack (tt_host.models.activation): the
active one and those a rollback returns to. A removed version's record stays in its entry, marked `removed`.
Copies a killed registration left half made (`.<n>.partial-<pid>/`, its process gone) are removed too.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

from tt_host import ids
from tt_host.fsutil import write_json_atomic
from tt_host.models import activation, registry
from tt_host.models.versions import VERSIONS_FOLDER, collectable, remove_stale_partials


def collect(dry_run: bool = False) -> dict[str, list[Any]]:
    """Remove (or with dry_run only list) the folders of `collectable` versions, marking each `removed` in its
    entry; under the registry's one lock, so no activation picks a version while it goes and no registration
    adds one to an entry gc is rewriting. {"removed": [{"id", "version", "path"}], "half_made_copies": [path of
    each stale copy a killed registration left, removed]}."""
    with registry.registry_lock("collecting model versions (tt models gc)"):
        return collect_locked(dry_run)


def collect_locked(dry_run: bool = False) -> dict[str, list[Any]]:
    """`collect` for a caller that holds the registry's lock."""
    root = registry.registry_dir() / VERSIONS_FOLDER
    found = collectable(registry.list_models(), activation.read_history())
    out = [{"id": entry["id"], "version": version["version"], "path": version["path"]} for entry, version in found]
    folders = sorted(root.iterdir()) if root.is_dir() else []
    if dry_run:
        return {"removed": out, "half_made_copies": [str(p) for p in remove_stale_partials(folders, dry_run=True)]}
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for entry, version in found:
        try:  # an entry edited by hand to name another folder never gets it deleted
            folder = ids.inside(Path(version["path"]), root)
        except ids.OutsideError:
            continue
        version["removed"] = at  # `version` is a dict inside entry["versions"]
        write_json_atomic(registry.entry_file(entry["id"]), entry)
        shutil.rmtree(folder, ignore_errors=True)
    return {"removed": out, "half_made_copies": [str(p) for p in remove_stale_partials(folders)]}
