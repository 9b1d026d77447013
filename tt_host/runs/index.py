"""The run index: every run tt started or resumed, wherever its folder, found by id from any directory.

One small JSON record per run folder, `$TT_HOME/runs/<id>-<path hash>.json` ({id, run_dir, spec_path, engine,
created_at, indexed_at}), written atomically when a run starts or resumes (tt_host.runs.drive). Two folders
with the same name (two projects' `experiment-1`) are two records. The folder is the truth: a record whose
folder was moved or deleted is listed as missing, never trusted for more than where the run was.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Optional

from tt_host import ids
from tt_host.fsutil import make_private_dir, write_json_atomic
from tt_host.models.registry import tt_home
from tt_host.runs.store import is_run_dir, now


def index_dir() -> Path:
    return tt_home() / "runs"


def _record_path(run_dir: Path) -> Path:
    digest = hashlib.sha256(str(run_dir).encode("utf-8", "surrogateescape")).hexdigest()[:12]
    return index_dir() / f"{ids.part(run_dir.name, 80) or 'run'}-{digest}.json"


def record(run_dir: Path, run_id: str, spec_path: str, engine: str, created_at: Any) -> None:
    """Note (or refresh) a run folder in the index."""
    run_dir = Path(run_dir).absolute()
    make_private_dir(index_dir())
    write_json_atomic(_record_path(run_dir), {"id": run_id, "run_dir": str(run_dir), "spec_path": spec_path,
                                              "engine": engine, "created_at": created_at, "indexed_at": now()})


def entries(problems: Optional[list[str]] = None) -> list[dict[str, Any]]:
    """Every readable record, with `missing` true when its folder is no longer a run directory. A record that
    is not one is named in `problems` when a list is given (never skipped silently by `tt runs list`)."""
    folder = index_dir()
    if not folder.is_dir():
        return []
    out = []
    for file in sorted(folder.glob("*.json")):
        try:
            entry = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError, RecursionError):
            entry = None
        if isinstance(entry, dict) and isinstance(entry.get("id"), str) and isinstance(entry.get("run_dir"), str):
            entry["missing"] = not is_run_dir(Path(entry["run_dir"]))
            out.append(entry)
        elif problems is not None:
            problems.append(f"{file}: not a run index record; delete it (the index is rebuilt as runs start or "
                            "resume: `tt run SPEC --resume RUN` records that run again)")
    return out


def by_id(run_id: str) -> list[dict[str, Any]]:
    return [entry for entry in entries() if entry["id"] == run_id]

