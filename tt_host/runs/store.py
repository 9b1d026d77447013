"""The run directory (docs/host.md, Runs): run.json, the frozen spec, stage folders, logs, the run lock.

Its layout is tt_host.runlayout's; run.json's shape is tt_host.runs.state's. The lock is held (flock)
by the process driving the run and by the stage processes it started (they inherit its descriptor), so
it outlives a killed `tt` until its stages have stopped.

Folders are 0700, files 0600, every JSON write is atomic.
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
from pathlib import Path
from typing import Any, Callable, Optional

from tt_host.errors import CorruptRecord, TTError
from tt_host.fsutil import (FileLock, LockHeld, NotARegularFile, make_private_dir, processes_holding, remove_tree,
                            reserve_space, sha256_file, write_json_atomic)
from tt_host import runlayout
from tt_host.runs.state import RunState


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


# What a failed run still writes after the disk filled: run.json and report.json / report.md, with room to spare.
RESERVE_BYTES = 256 * 1024


class RunInUseError(TTError, RuntimeError):
    """Another process drives the run directory, or stages of a dead one still run (exit 2)."""

    exit_code = 2


class RunDir:
    def __init__(self, path: Path):
        self.path = Path(path).absolute()
        self._lock: Optional[FileLock] = None

    # --- paths -----------------------------------------------------------
    @property
    def run_json(self) -> Path:
        return self.path / runlayout.RUN_JSON

    @property
    def spec_json(self) -> Path:
        return self.path / runlayout.SPEC_JSON

    @property
    def logs(self) -> Path:
        return self.path / runlayout.LOGS

    def stage_dir(self, stage: str) -> Path:
        return self.path / stage

    def result_path(self, stage: str) -> Path:
        return self.stage_dir(stage) / runlayout.RESULT

    # --- state -----------------------------------------------------------
    def exists(self) -> bool:
        return self.run_json.is_file()

    def load(self) -> dict[str, Any]:
        """run.json as written (for reading; a run being driven uses `load_state`). One that is not a run's
        state (not JSON, not an object, stages not objects) raises CorruptRecord naming it."""
        remedy = (f"restore it from a backup, or move {self.path} aside and start a new run (`tt run SPEC`); "
                  "tt never rewrites a run.json it cannot read")
        try:
            data = json.loads(self.run_json.read_bytes().decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise CorruptRecord(self.run_json, f"not UTF-8 text ({exc.reason} at byte {exc.start})", remedy) from None
        except json.JSONDecodeError as exc:
            raise CorruptRecord(self.run_json, f"not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})",
                                remedy) from None
        except RecursionError:
            raise CorruptRecord(self.run_json, "JSON nested too deeply to read", remedy) from None
        except ValueError as exc:  # an integer thousands of digits long
            raise CorruptRecord(self.run_json, f"not a run's JSON ({exc})", remedy) from None
        if not isinstance(data, dict):
            raise CorruptRecord(self.run_json, f"a JSON {type(data).__name__}, not an object", remedy)
        stages = data.get("stages", {})
        if not isinstance(stages, dict) or not all(isinstance(s, dict) for s in stages.values()):
            raise CorruptRecord(self.run_json, "its \"stages\" is not an object of stage objects", remedy)
        return data

    def load_state(self) -> RunState:
        try:
            return RunState.from_json(self.load())
        except TypeError as exc:  # a field of an unexpected shape
            raise CorruptRecord(self.run_json, f"not a run state ({exc})",
                                f"restore it from a backup, or move {self.path} aside and start a new run") from None

    def save(self, state: RunState) -> None:
        state.updated_at = now()
        write_json_atomic(self.run_json, state.to_json())

    def write_spec(self, spec: dict[str, Any]) -> None:
        """The frozen spec.json, replaced only by a resume the plan allowed."""
        write_json_atomic(self.spec_json, spec)

    def remove_stage(self, stage: str) -> None:
        """Delete a replaceable stage's folder before it runs again from scratch."""
        remove_tree(self.stage_dir(stage))

    def reserve(self) -> None:
        """Hold RESERVE_BYTES in the run folder (DiskFull when even that is not free: nothing is started)."""
        reserve_space(self.path / runlayout.RESERVE, RESERVE_BYTES)

    def release_reserve(self) -> None:
        """Give the held space back: the disk filled (run.json and the report must still fit), or the run ended."""
        (self.path / runlayout.RESERVE).unlink(missing_ok=True)

    def create(self, state: RunState, spec: dict[str, Any]) -> None:
        make_private_dir(self.path)
        make_private_dir(self.logs)
        self.write_spec(spec)
        self.save(state)

    # --- lock ------------------------------------------------------------
    def lock(self, wait_seconds: float = 0.0, on_wait: Optional[Callable[[str], None]] = None) -> None:
        """Refuse at once when another process drives this run directory. When only stage processes of a `tt`
        that has died hold it (they save a checkpoint and exit on their own), wait up to `wait_seconds` for
        them, saying so through `on_wait`, then take it; refused if they are still there then."""
        make_private_dir(self.path)
        holder = f"pid {os.getpid()} on {socket.gethostname()} since {now()}"
        lock = FileLock(self.path / runlayout.LOCK, holder=holder)
        try:
            self._lock = lock.acquire(blocking=False)
            return
        except NotARegularFile as exc:
            raise TTError(f"cannot lock run directory {self.path}: {exc}", 2) from None
        except LockHeld as exc:
            held_by, pids = exc.holder, processes_holding(lock.path)
        left = orphans(held_by, pids)
        if left is None or wait_seconds <= 0:
            raise RunInUseError(in_use_message(self.path, held_by, pids))
        if on_wait is not None:
            on_wait(f"run directory {self.path}: the tt that ran it (pid {left[0]}) has exited; waiting up to "
                    f"{wait_seconds:.0f}s for the processes it started (pid {', '.join(map(str, left[1]))}; "
                    f"{held_by}) to save their checkpoint and exit (--no-wait refuses instead)")
        deadline = time.monotonic() + wait_seconds
        while True:
            try:
                self._lock = lock.acquire(blocking=False)
                return
            except LockHeld as exc:
                held_by, pids = exc.holder, processes_holding(lock.path)
            if pids and orphans(held_by, pids) is None:  # another tt took it meanwhile
                raise RunInUseError(in_use_message(self.path, held_by, pids))
            if time.monotonic() >= deadline:
                raise RunInUseError(f"waited {wait_seconds:.0f}s: " + in_use_message(self.path, held_by, pids))
            time.sleep(0.1)

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
    return (Path(path) / runlayout.RUN_JSON).is_file()


def find_runs(root: Path) -> list[Path]:
    """Run directories under `root` (a spec folder's `.tuned-tensor/runs`, or any folder)."""
    root = Path(root)
    candidates = [root] if is_run_dir(root) else []
    for base in (root, root.joinpath(*runlayout.RUNS_FOLDER)):
        if base.is_dir():
            candidates += [p for p in sorted(base.iterdir()) if is_run_dir(p)]
    seen, unique = set(), []
    for path in candidates:
        if path.resolve() not in seen:
            seen.add(path.resolve())
            unique.append(path)
    return unique


def orphans(holder: str, pids: list[int]) -> Optional[tuple[int, list[int]]]:
    """(pid of the dead `tt`, pids still holding the lock) when the lock is held only by processes a `tt` on
    this host started and that `tt` is gone; None when a live `tt` (or another host's) holds it."""
    pids = [p for p in pids if p != os.getpid()]
    found = re.match(r"pid (\d+) on (\S+)", holder)
    host_pid = int(found.group(1)) if found else None
    if found and found.group(2) == socket.gethostname() and pids and host_pid not in pids:
        return host_pid, pids
    return None


def in_use_message(path: Path, holder: str, pids: list[int]) -> str:
    """Why a run directory cannot be locked: a live `tt`, or stage processes a dead `tt` left finishing."""
    pids = [p for p in pids if p != os.getpid()]
    if (left := orphans(holder, pids)) is not None:
        host_pid = left[0]
        return (f"run directory {path} is still in use: the tt that ran it (pid {host_pid}) has exited, but "
                f"processes it started still run (pid {', '.join(map(str, pids))}; {holder}); they save a "
                "checkpoint at their next step boundary and exit within seconds. Wait until they have exited, "
                "then resume")
    running = f" (processes: pid {', '.join(map(str, pids))})" if pids else ""
    return (f"run directory {path} is in use by {holder}{running}; wait for it to finish or stop it "
            "(Ctrl-C checkpoints and exits), then resume")
