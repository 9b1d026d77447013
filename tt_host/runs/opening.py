"""Opening a run folder: refuse one that can never be a run, lock it, and leave nothing behind if unused.

A `--resume` folder is refused at once (RunRefused, exit 2, nothing made) when it is a file, FIFO or
device, a dangling symbolic link, has a parent that is a file, or exists holding something other than
a run (`foreign`). The lock comes first (`open_run`): whether the run exists is decided under it, so a
second `tt run --resume R` started meanwhile is refused at once instead of re-creating R once the
first has finished. A folder the opening made, in which no run was created, is removed again.

What an unfinished creation leaves (the lock, an empty logs/, spec.json, their temp files: a run killed
or out of disk before run.json existed) is not "foreign": the next `--resume` creates the run over it.
Once the lock is held, the temp files a killed tt left beside the run's own records (`.run.json.*.tmp`,
`.spec.json.*.tmp`, the reports': an atomic write killed before its rename) are removed (`sweep_temp_files`):
no writer of them can be running then, so a resumed run leaves none behind.
"""

from __future__ import annotations

import os
import re
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Optional

from tt_host.errors import TTError
from tt_host import runlayout
from tt_host.runs.store import RunDir
from tt_stagekit.userinput import os_reason, special_kind


class RunRefused(TTError):
    """The run cannot start or resume as asked (exit 2); nothing was changed."""

    exit_code = 2


def check_run_path(path: Path) -> None:
    """Refuse at once a `--resume` that can never be a run directory (RunRefused, exit 2, nothing made):
    a file, FIFO or device, a dangling symbolic link (following it would create its target), a parent
    that is a file, a name the filesystem cannot hold."""
    try:
        mode = os.lstat(path).st_mode
        if stat.S_ISLNK(mode):
            if not os.path.exists(path):
                raise RunRefused(f"--resume {path} is a symbolic link to {os.readlink(path)}, which does not "
                                 "exist; pass a real folder (new or a run directory)")
            mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise RunRefused(f"--resume {path}: {os_reason(exc)}") from None
    if not stat.S_ISDIR(mode):
        raise RunRefused(f"--resume {path} is {special_kind(mode)}, not a run directory; pass a new folder or "
                         "an existing run directory")


def _creation_leftover(entry: os.DirEntry) -> bool:
    """What starting a run leaves before run.json exists (a run being started now, or one killed or out of disk
    while it was created): the run lock, the space reserve, an empty logs/, spec.json and the temp files of
    their atomic writes.
    Each must be what tt makes: a symbolic link never counts (a planted `.tt-run.lock -> victim`)."""
    if entry.is_symlink():
        return False
    if entry.name == runlayout.LOGS:
        return entry.is_dir() and not any(os.scandir(entry.path))
    if entry.name in (runlayout.LOCK, runlayout.SPEC_JSON, runlayout.RESERVE):
        return entry.is_file()
    return entry.is_file() and any(entry.name.startswith(f".{name}.") and entry.name.endswith(".tmp")
                                   for name in (runlayout.SPEC_JSON, runlayout.RUN_JSON))


_TEMP = re.compile(r"\.(?:run\.json|spec\.json|report\.json|report\.md|report\.html|report-[a-z0-9-]+\.svg)"
                   r"\.[A-Za-z0-9_]+\.tmp")  # tt_stagekit.files.atomic_file's temp names for the run's records


def sweep_temp_files(path: Path) -> None:
    """Remove the temp files of atomic writes killed before their rename from the run folder `path` (regular
    files only: a link is never followed nor removed). Call it only under the run's lock."""
    try:
        with os.scandir(path) as entries:
            stale = [e.path for e in entries if _TEMP.fullmatch(e.name) and e.is_file(follow_symlinks=False)]
    except OSError:
        return
    for file in stale:
        try:
            os.unlink(file)
        except FileNotFoundError:
            pass


def _fresh(path: Path) -> bool:
    """An empty folder, or one holding only what an unfinished creation leaves (`_creation_leftover`)."""
    if not path.is_dir():
        return False
    with os.scandir(path) as entries:
        return all(_creation_leftover(entry) for entry in entries)


def refuse_foreign(run: RunDir) -> None:
    """Refuse a folder that exists, is not a run directory and is neither empty nor being started."""
    if run.path.exists() and not run.exists() and not _fresh(run.path):
        raise RunRefused(f"{run.path} exists and is not a tt run directory; pass an empty or new folder")


def claim_new_run_dir(path: Path) -> Path:
    """Make the default run folder `path` (`<time>-<spec hash>`) exclusively: when a `tt run SPEC` started in the
    same second made it first, `path-2`, `path-3`, ... so two runs never share a folder (or an id)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    for number in range(1, 10_000):
        candidate = path if number == 1 else path.with_name(f"{path.name}-{number}")
        try:
            candidate.mkdir(mode=0o700)
            return candidate
        except FileExistsError:
            continue
    raise RunRefused(f"{path.parent} holds 10,000 runs of this spec started in the same second; pass --resume DIR")


def remove_unstarted(path: Path) -> None:
    """Remove a folder this opening made in which no run was created: only creation leftovers, then the
    folder itself (anything else found there is left alone, and so is the folder)."""
    try:
        with os.scandir(path) as entries:
            for entry in entries:
                if _creation_leftover(entry):
                    os.rmdir(entry.path) if entry.is_dir(follow_symlinks=False) else os.unlink(entry.path)
        path.rmdir()
    except OSError:
        pass


@contextmanager
def open_run(run: RunDir, wait_seconds: float = 0.0, on_wait: Optional[Callable[[str], None]] = None,
             made: bool = False) -> Iterator[bool]:
    """Lock the run folder for the block (refused at once when another process holds it); yields whether
    the run existed. A folder made here in which no run was created is removed afterwards."""
    refuse_foreign(run)
    made = made or not run.path.exists()  # made: the folder was claimed for this run (claim_new_run_dir)
    run.lock(wait_seconds, on_wait)  # waits only for the stages of a dead tt (RunDir.lock)
    try:
        sweep_temp_files(run.path)
        existed = run.exists()
        if not existed:
            refuse_foreign(run)  # decided again under the lock
        yield existed
    finally:
        run.release_reserve()
        run.unlock()
        if made and not run.exists():  # nothing was run (or its creation failed): leave no folder behind
            remove_unstarted(run.path)
