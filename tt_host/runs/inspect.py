"""Reading runs from outside: find a run by folder or id, summarize it, stream its stage events, compare metrics.

Used by `tt runs get|events|compare`. Nothing here writes to a run directory.
A run is live while its process holds `.tt-run.lock` (tt_host.runs.store);
the kernel drops that lock when the process dies, so a killed run never looks
live forever.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from tt_host.errors import TTError
from tt_host.models import prefixes
from tt_host.engines.runner import parse_event
from tt_host.runs import index
from tt_host.runlayout import RUNS_FOLDER
from tt_host.runs.store import RunDir, find_runs, is_run_dir

LOCK_NAME = ".tt-run.lock"


class RunNotFound(TTError, LookupError):
    """No run by that folder or id (exit 2)."""

    exit_code = 2


def resolve_run(reference: str | Path, cwd: Optional[Path] = None) -> Path:
    """A run directory; a run id (or its unique prefix) under ./.tuned-tensor/runs/ or in the run index
    (tt_host.runs.index). A prefix naming several runs is refused listing them (exit 2); a run whose folder
    was moved or deleted is named with where it was."""
    path = Path(reference).expanduser()
    if is_run_dir(path):
        return path.absolute()
    here = (cwd or Path.cwd()).joinpath(*RUNS_FOLDER)
    reference = str(reference)
    if "/" in reference or not reference:
        raise RunNotFound(f"{reference}: not a run directory; see `tt runs list`")
    local = {p.name: p.absolute() for p in find_runs(here)} if here.is_dir() else {}
    recorded = index.entries()
    known = set(local) | {entry["id"] for entry in recorded}
    run_id = prefixes.pick(reference, known, "run")
    if run_id is None:
        raise RunNotFound(f"{reference}: not a run directory, nor a run id under {here} or in the run index "
                          f"({index.index_dir()}); see `tt runs list`")
    if run_id in local:
        return local[run_id]
    found = [entry for entry in recorded if entry["id"] == run_id]
    present = [entry for entry in found if not entry["missing"]]
    if len(present) > 1:
        raise prefixes.AmbiguousPrefix(f"run id {run_id!r} names {len(present)} run folders: "
                                       f"{', '.join(e['run_dir'] for e in present)}; give the folder")
    if not present:
        raise RunNotFound(f"run {run_id} was at {found[0]['run_dir']}, which is missing (moved or deleted); "
                          "give its new folder, or see `tt runs list`")
    return Path(present[0]["run_dir"])


def load_report(run: Path) -> dict[str, Any]:
    try:
        data = json.loads((run / "report.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def is_live(run: Path) -> bool:
    """True while a process holds the run's lock (probed with a shared lock, never taking it over)."""
    try:
        fd = os.open(run / LOCK_NAME, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def summary(run: Path) -> dict[str, Any]:
    state = RunDir(run).load()
    report = load_report(run)
    return {
        "run_dir": str(run), "id": state.get("id"), "engine": state.get("engine"), "status": state.get("status"),
        "live": is_live(run), "spec": state.get("spec_name"), "spec_path": state.get("spec_path"),
        "created_at": state.get("created_at"), "updated_at": state.get("updated_at"), "error": state.get("error"),
        "stages": {name: {k: s.get(k) for k in ("state", "seconds", "exit_code", "error", "started_at", "finished_at")
                          if s.get(k) is not None}
                   for name, s in (state.get("stages") or {}).items()},
        "metrics": report.get("metrics", {}), "models": report.get("models", []),
        "general_regression": report.get("general_regression"),
    }


def _stage_names(run: Path) -> list[str]:
    try:
        return list((RunDir(run).load().get("stages") or {}))
    except (OSError, json.JSONDecodeError):
        return []


def events(run: Path, follow: bool = False, poll: float = 0.2,
           sleep: Callable[[float], None] = time.sleep) -> Iterator[dict[str, Any]]:
    """Every stage event in the run's logs, in stage order, each with its `stage`.

    With follow, keep reading while the run is live and stop once it ends
    (after reading what it wrote last)."""
    offsets: dict[str, int] = {}
    while True:
        live = follow and is_live(run)
        for stage in _stage_names(run):
            log = run / "logs" / f"{stage}.log"
            try:
                with open(log, "rb") as handle:
                    handle.seek(offsets.get(stage, 0))
                    data = handle.read()
            except FileNotFoundError:
                continue
            complete = data[: data.rfind(b"\n") + 1] if live else data
            offsets[stage] = offsets.get(stage, 0) + len(complete)
            for line in complete.decode("utf-8", "replace").splitlines():
                if line.strip():
                    event = parse_event(line)
                    event.pop("raw", None)
                    yield {"stage": stage, **event}
        if not live:
            return
        sleep(poll)


def describe(event: dict[str, Any]) -> str:
    """One human line for an event."""
    kind = event.get("type")
    if kind == "progress":
        metrics = " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                           for k, v in (event.get("metrics") or {}).items())
        return f"progress {event.get('step')}/{event.get('total')} {event.get('unit', '')} {metrics}".rstrip()
    if kind == "log":
        return f"{event.get('level', 'info')}: {event.get('message', '')}"
    rest = {k: v for k, v in event.items() if k not in ("type", "stage")}
    return f"{kind} {json.dumps(rest, ensure_ascii=False, default=str)}"


def compare(runs: list[Path]) -> dict[str, Any]:
    """Every metric of the runs side by side: {"runs": [...], "metrics": {name: [value or None, ...]}}, and for
    two runs what they share (tt_host.runs.compare): `held_out` and `general` (counts shared and not, metrics
    re-scored on the shared prompts) and `warnings` (a prompt one trained on while the other evaluated it)."""
    from tt_host.runs.compare import compare_prompts

    reports = [load_report(run) for run in runs]
    names = sorted({name for report in reports for name in report.get("metrics", {})})
    out = {
        "runs": [{"id": r.get("run_id") or run.name, "run_dir": str(run), "status": r.get("status")}
                 for run, r in zip(runs, reports)],
        "metrics": {name: [r.get("metrics", {}).get(name) for r in reports] for name in names},
    }
    if len(runs) == 2:
        out.update(compare_prompts(runs[0], runs[1], tuple(r["id"] for r in out["runs"])))
    return out
