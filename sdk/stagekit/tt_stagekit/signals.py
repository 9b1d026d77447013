"""Stop requests as supervisors send them, and a stage that outlives its host. Stdlib only.

One stop request often arrives as several copies of a signal: systemd (`KillMode=control-group`),
Kubernetes, Slurm `scancel`, Docker and `kill -TERM -<pgid>` signal every process at once, and then
`tt` forwards its own copy to the stage and the torchrun agent forwards its copy to every rank. So:

- `StopRequests` counts signals: the first is the stop request, any signal within
  `window_seconds()` of it (`TT_SIGNAL_WINDOW_SECONDS`, default 1.5) is a copy of the same request
  and ignored, a signal after that is a second, deliberate request (stop at once). The host, the
  stage and the torchrun agent each keep one.
- `watch_host()` makes a stage process notice when the `tt` that started it dies (SIGKILL, OOM):
  it asks the kernel for a SIGTERM when its parent exits (Linux `PR_SET_PDEATHSIG`; elsewhere a
  thread polls the parent pid), so the stage saves a checkpoint at its next step boundary and exits.
- `host_gone()` sends what the stage still writes to its log file once the host's pipe is closed.

See docs/operations.md ("Stop signals") for the reasoning.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Optional

DEFAULT_WINDOW_SECONDS = 1.5
HOST_PID_ENV = "TT_HOST_PID"  # the pid of the process that started this stage process (tt, or the torchrun agent)
STAGE_LOG_ENV = "TT_STAGE_LOG"  # where the stage's output goes once the host is gone
# Set in a stage the stage server forked (tt_stagekit.stageserver): the server's pid, the stage's parent. Its
# launcher, tt's child, relays the stop that tt's death sends it; the stage's own death signal watches the server.
SERVED_BY_ENV = "TT_STAGE_SERVED_BY"

FIRST, COPY, AGAIN = "first", "copy", "again"
PR_SET_PDEATHSIG = 1


def window_seconds() -> float:
    try:
        return max(0.0, float(os.environ.get("TT_SIGNAL_WINDOW_SECONDS", DEFAULT_WINDOW_SECONDS)))
    except ValueError:
        return DEFAULT_WINDOW_SECONDS


class StopRequests:
    """Classifies each stop signal as the first request, a copy of it, or a second request."""

    def __init__(self, window: Optional[float] = None):
        self.window = window_seconds() if window is None else window
        self.first_at: Optional[float] = None

    @property
    def requested(self) -> bool:
        return self.first_at is not None

    def receive(self, now: Optional[float] = None) -> str:
        now = time.monotonic() if now is None else now
        if self.first_at is None:
            self.first_at = now
            return FIRST
        return COPY if now - self.first_at <= self.window else AGAIN


def host_pid() -> Optional[int]:
    try:
        return int(os.environ[HOST_PID_ENV])
    except (KeyError, ValueError):
        return None


def served_by() -> Optional[int]:
    try:
        return int(os.environ[SERVED_BY_ENV])
    except (KeyError, ValueError):
        return None


def host_alive() -> bool:
    """Whether the process that started this one still runs (True when tt did not start it). A stage the stage
    server forked asks whether its parent (the server) runs and tt's pid is still taken."""
    host = host_pid()
    if host is None:
        return True
    server = served_by()
    if server is None:
        return os.getppid() == host
    return os.getppid() == server and _running(host)


def _running(pid: int) -> bool:
    """Whether `pid` runs: exists and is no zombie (a `tt` that just died is one until its parent reaps it)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except FileNotFoundError:
        return False
    except (OSError, IndexError):
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        pass
    return True


def watch_host(sig: int = signal.SIGTERM) -> None:
    """Get `sig` when the host process (TT_HOST_PID, our parent; for a served stage its server) exits; at once if
    it already has."""
    host = host_pid()
    if host is None:
        return
    parent = served_by() or host
    if not _parent_death_signal(sig):
        threading.Thread(target=_poll_parent, args=(parent, sig), name="tt-host-watch", daemon=True).start()
    if os.getppid() != parent:  # the host died before the watch was set
        os.kill(os.getpid(), sig)


def _parent_death_signal(sig: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except Exception:
        return False


def _poll_parent(host: int, sig: int) -> None:
    while os.getppid() == host:
        time.sleep(0.5)
    os.kill(os.getpid(), sig)


_redirected = False


def host_gone() -> None:
    """The host's pipe is closed: send this process's stdout and stderr to the stage log
    (TT_STAGE_LOG, appended) or, without one, to /dev/null, so later writes cannot fail."""
    global _redirected
    if _redirected:
        return
    _redirected = True
    target = os.environ.get(STAGE_LOG_ENV) or os.devnull
    try:
        # never through a link (the host opened the log the same way); /dev/null itself is a device
        fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT | (0 if target == os.devnull else os.O_NOFOLLOW),
                     0o600)
    except OSError:
        fd = os.open(os.devnull, os.O_WRONLY)
    for stream in (1, 2):
        try:
            os.dup2(fd, stream)
        except OSError:
            pass
    os.close(fd)
