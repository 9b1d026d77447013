"""Processes under a `tt` started by a test, found through /proc, and a race-free way to signal them.

A test that waits for a step (or a checkpoint) and then signals the run races the run: on a loaded
machine the test may look late, and a short run may even finish first. `frozen()` closes that window:
the moment the awaited event is seen, `tt` and every process under it are stopped (SIGSTOP, and the
test waits until each one is) so the run cannot move on while the test checks where it is and sends
its signals; letting them go again (SIGCONT) delivers those signals to all of them at the same moment,
as a supervisor's `kill -TERM -<pgid>` does. Process states come from tests/process_support.py.
Stdlib only (these tests run in the host venv).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Iterator

from process_support import alive, process_state


def children() -> dict[int, list[int]]:
    """{parent pid: [child pids]} of every process."""
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def descendants(pid: int) -> list[int]:
    tree, found, todo = children(), [], [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def wait_gone(pids: list[int], timeout: float = 60) -> float:
    started = time.monotonic()
    while any(alive(p) for p in pids):
        assert time.monotonic() - started < timeout, f"still running {timeout}s later: {[p for p in pids if alive(p)]}"
        time.sleep(0.02)
    return time.monotonic() - started


def send(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def freeze(root: int, timeout: float = 30) -> list[int]:
    """SIGSTOP `root` and every process under it (again for any started meanwhile); return once all are
    stopped, root first. Only a stopped process can start no new ones, so the tree is final when a scan
    finds nothing new."""
    frozen: list[int] = []
    while True:
        new = [pid for pid in [root, *descendants(root)] if pid not in frozen and alive(pid)]
        if not new:
            break
        send(new, signal.SIGSTOP)
        frozen += new
    deadline = time.monotonic() + timeout
    while any(process_state(pid) not in ("T", "t", None, "Z", "X") for pid in frozen):
        assert time.monotonic() < deadline, f"not stopped after {timeout}s: {[(p, process_state(p)) for p in frozen]}"
        time.sleep(0.001)
    return frozen


@contextlib.contextmanager
def frozen(root: int) -> Iterator[list[int]]:
    """`tt` (root) and every process under it, stopped for the block; all continued together after it."""
    pids = freeze(root)
    try:
        yield pids
    finally:
        send(pids, signal.SIGCONT)
