"""Waiting on process states instead of durations: a live process, a signal taken, a process held still.

Tests that race a subprocess (signal it "while it runs", "before it finishes") hold it still with SIGSTOP
once the state they need is reached, so it cannot run ahead, and wait for what the kernel reports in /proc:
a signal still pending, a process stopped or gone. Every wait polls for a state and fails naming it after a
generous bound (a loaded 2-core machine); the bound is never what a test checks.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Callable, Iterator, TypeVar

T = TypeVar("T")


def wait_until(condition: Callable[[], T], what: str, timeout: float = 120) -> T:
    """Poll `condition` until it is true and return its value; fail naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def process_state(pid: int) -> str | None:
    """The kernel's one-letter state (R, S, T, Z, ...) of `pid`, or None when there is no such process."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def alive(pid: int) -> bool:
    """Running or held (a zombie waiting for a reaper counts as gone)."""
    return process_state(pid) not in (None, "Z", "X")


def signal_pending(pid: int, sig: int) -> bool:
    """Whether `sig` was sent to `pid` and its handler has not taken it yet (SigPnd/ShdPnd in /proc)."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return False
    masks = [int(line.split()[1], 16) for line in lines if line.startswith(("SigPnd:", "ShdPnd:"))]
    return any(mask >> (int(sig) - 1) & 1 for mask in masks)


def send_and_wait_taken(pid: int, sig: int) -> None:
    """Send `sig` and wait until the process has taken it (a second copy sent after this is a second signal,
    not merged with this one by the kernel)."""
    os.kill(pid, sig)
    wait_until(lambda: not signal_pending(pid, sig), f"pid {pid} to take {signal.Signals(sig).name}")


@contextlib.contextmanager
def held(group: int) -> Iterator[None]:
    """Hold the process group `group` still (SIGSTOP, then every member stopped) for the block; SIGCONT after."""
    os.killpg(group, signal.SIGSTOP)
    try:
        wait_until(lambda: all(process_state(pid) in ("T", "t", "Z", "X", None) for pid in group_members(group)),
                   f"process group {group} to stop")
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGCONT)


def group_members(group: int) -> list[int]:
    """Pids whose process group is `group` (found through /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[2]) == group:
                    found.append(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
    return found
