"""The run directory (docs/host.md, Runs): run.json, the frozen spec, stage folders, logs, the run lock.

Layout:

    <run>/run.json        engine, spec hash, versions, status, per-stage state and fingerprints
    <run>/spec.json       the spec as validated for this run (frozen; updated only by a safe resume)
    <run>/<stage>/        one folder per stage: request.json, result.json, outputs
    <run>/logs/<stage>.log
    <run>/report.json, report.md
    <run>/.tt-run.lock    held (flock) by the process driving the run and by the stage processes it
                          started (they inherit its descriptor), so it outlives a killed `tt`
                          until its stages have stopped

Folders are 0700, files 0600, every JSON write is atomic.
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
from pathlib import Path
from typing import Any, Optional

from tt_host.fsutil import FileLock, LockHeld, make_private_dir, processes_holding, sha256_file, write_json_atomic

RUN_FORMAT = 1
STAGE_STATES = ("pending", "running", "completed", "failed", "interrupted", "skipped")


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class RunInUseError(RuntimeError):
    pass


class RunDir:
    def __init__(self, path: Path):
        self.path = Path(path).absolute()
        self._lock: Optional[FileLock] = None

    # --- paths -----------------------------------------------------------
    @property
    def run_json(self) -> Path:
        return self.path / "run.json"

    @property
    def spec_json(self) -> Path:
        return self.path / "spec.json"

    @property
    def logs(self) -> Path:
        return self.path / "logs"

    def stage_dir(self, stage: str) -> Path:
        return self.path / stage

    def result_path(self, stage: str) -> Path:
        return self.stage_dir(stage) / "result.json"

    # --- state -----------------------------------------------------------
    def exists(self) -> bool:
        return self.run_json.is_file()

    def load(self) -> dict[str, Any]:
        return json.loads(self.run_json.read_text(encoding="utf-8"))

    def save(self, state: dict[str, Any]) -> None:
        state["updated_at"] = now()
        write_json_atomic(self.run_json, state)

    def create(self, state: dict[str, Any], spec: dict[str, Any]) -> None:
        make_private_dir(self.path)
        make_private_dir(self.logs)
        write_json_atomic(self.spec_json, spec)
        self.save(state)

    # --- lock ------------------------------------------------------------
    def lock(self) -> None:
        """Refuse at once when another process drives this run directory, or stages of a dead one still run."""
        make_private_dir(self.path)
        holder = f"pid {os.getpid()} on {socket.gethostname()} since {now()}"
        lock = FileLock(self.path / ".tt-run.lock", holder=holder)
        try:
            self._lock = lock.acquire(blocking=False)
        except LockHeld as exc:
            raise RunInUseError(in_use_message(self.path, exc.holder, processes_holding(lock.path))) from None

    def unlock(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def lock_fds(self) -> tuple[int, ...]:
        """The lock's descriptor, for the stage processes to inherit (the lock then lives as long as they do)."""
        fd = self._lock.fileno() if self._lock is not None else None
        return () if fd is None else (fd,)

    def note_stage(self, stage: str, pid: int) -> None:
        """Name the running stage's pid in the lock file, for a refused second `tt` to report."""
        if self._lock is not None:
            self._lock.describe(f"{self._lock.holder.split('; ')[0]}; stage {stage} pid {pid}")

    # --- stage results ---------------------------------------------------
    def read_result(self, stage: str) -> Optional[dict[str, Any]]:
        path = self.result_path(stage)
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def result_digest(self, stage: str) -> Optional[str]:
        path = self.result_path(stage)
        return sha256_file(path) if path.is_file() else None


def is_run_dir(path: Path) -> bool:
    return (Path(path) / "run.json").is_file()


def find_runs(root: Path) -> list[Path]:
    """Run directories under `root` (a spec folder's `.tuned-tensor/runs`, or any folder)."""
    root = Path(root)
    candidates = [root] if is_run_dir(root) else []
    for base in (root, root / ".tuned-tensor" / "runs"):
        if base.is_dir():
            candidates += [p for p in sorted(base.iterdir()) if is_run_dir(p)]
    seen, unique = set(), []
    for path in candidates:
        if path.resolve() not in seen:
            seen.add(path.resolve())
            unique.append(path)
    return unique


def in_use_message(path: Path, holder: str, pids: list[int]) -> str:
    """Why a run directory cannot be locked: a live `tt`, or stage processes a dead `tt` left finishing."""
    pids = [p for p in pids if p != os.getpid()]
    found = re.match(r"pid (\d+) on (\S+)", holder)
    host_pid = int(found.group(1)) if found else None
    if found and found.group(2) == socket.gethostname() and pids and host_pid not in pids:
        return (f"run directory {path} is still in use: the tt that ran it (pid {host_pid}) has exited, but "
                f"processes it started still run (pid {', '.join(map(str, pids))}; {holder}); they save a "
                "checkpoint at their next step boundary and exit within seconds. Wait until they have exited, "
                "then resume")
    running = f" (processes: pid {', '.join(map(str, pids))})" if pids else ""
    return (f"run directory {path} is in use by {holder}{running}; wait for it to finish or stop it "
            "(Ctrl-C checkpoints and exits), then resume")
