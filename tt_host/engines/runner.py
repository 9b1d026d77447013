"""Running one stage as a subprocess in its engine environment.

The stage runs as `python -P -m <module> <request.json>` (or the arguments its
`Stage.launch` returns, e.g. a torchrun launcher; -P and PYTHONSAFEPATH keep the run folder off
`sys.path`: tt_host.engines.isolation) in a new session (its
own process group). Its stdout and stderr lines are parsed as JSON-line events
(docs/protocol.md); anything else becomes a log event, marked `noise` (level debug, never shown on the
terminal) when it is known-harmless third-party output (tt_host.engines.noise). Every line is appended
to the stage log. SIGINT / SIGTERM received by the host are forwarded to the
stage's group as SIGTERM; after the grace period (default 120 s,
`TT_STAGE_GRACE_SECONDS`) or a second stop request, the group is killed.
Signals within `TT_SIGNAL_WINDOW_SECONDS` (1.5 s) of the first are copies of the
same request (a supervisor signalling every process at once) and change nothing
(tt_stagekit.signals; docs/operations.md).

The stage learns the host's pid (`TT_HOST_PID`: it stops when the host dies)
and its log file (`TT_STAGE_LOG`: where it writes once the host is gone), and
can be handed open file descriptors, e.g. the run lock, so that the lock lives
as long as the stage. Nothing here knows about torch or any particular engine.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from tt_host.engines import stageserver
from tt_host.engines.isolation import python_command, python_env
from tt_host.engines.noise import NoiseFilter
from tt_stagekit.contract import EXIT_INTERRUPTED
from tt_stagekit.signals import AGAIN, COPY, HOST_PID_ENV, STAGE_LOG_ENV, StopRequests

DEFAULT_GRACE_SECONDS = 120.0


def grace_seconds() -> float:
    try:
        return float(os.environ.get("TT_STAGE_GRACE_SECONDS", DEFAULT_GRACE_SECONDS))
    except ValueError:
        return DEFAULT_GRACE_SECONDS


def parse_event(line: str) -> dict[str, Any]:
    """One output line as an event; a line that is not an event becomes a log event."""
    stripped = line.strip()
    if stripped.startswith("{"):
        try:
            event = json.loads(stripped)
        except json.JSONDecodeError:
            event = None
        if isinstance(event, dict) and isinstance(event.get("type"), str):
            return event
    return {"type": "log", "level": "info", "message": line.rstrip("\n"), "raw": True}


class OutputReader:
    """Reads a child's output lines on its own thread and hands each to `handle`.

    It survives its own errors (a log write failing on a full disk, an event handler
    raising): the first is reported once on stderr and kept in `error`, and the
    output is drained to its end either way, so the child never blocks on a full
    pipe and the caller never hangs; the caller turns `error` into a clear failure.
    """

    def __init__(self, stream: Any, handle: Callable[[str], None], what: str):
        self.stream, self.handle, self.what = stream, handle, what
        self.error: Optional[str] = None
        self.reading_since: Optional[float] = None  # when the reader began waiting for its next line; None: handling
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "OutputReader":
        self.thread.start()
        return self

    def finish(self, idle_seconds: float = 5.0) -> None:
        """After the process exited: wait until its output is handled to the end, however long handling takes (a
        loaded machine can leave hundreds of lines in the pipe, the stage's result among them), giving up only when
        the reader has waited `idle_seconds` for a line that does not come (a grandchild holding the pipe open).
        A reader that only looks idle, because the whole process was paused or starved of CPU while it was about
        to read, still has output (or the end of it) waiting in the pipe: it is waited for."""
        while self.thread.is_alive():
            self.thread.join(timeout=0.1)
            since = self.reading_since
            if since is not None and time.monotonic() - since > idle_seconds and not self._pending():
                return

    def _pending(self) -> bool:
        """Whether the pipe holds something the reader has not read yet: a line, or its end."""
        try:
            readable, _, _ = select.select([self.stream.fileno()], [], [], 0)
        except (OSError, ValueError):
            return False
        return bool(readable)

    def failed(self, message: str) -> None:
        """Note a failure; only the first is reported and kept."""
        if self.error is not None:
            return
        self.error = message
        try:
            sys.stderr.write(f"tt: {message} (still reading the {self.what}'s output)\n")
            sys.stderr.flush()
        except Exception:  # stderr itself is gone: the error is still kept for the caller
            pass

    def _run(self) -> None:
        try:
            while True:
                self.reading_since = time.monotonic()
                line = self.stream.readline()
                self.reading_since = None
                if not line:
                    return
                try:
                    self.handle(line)
                except BaseException as exc:  # noqa: B902 - nothing may end this thread early
                    self.failed(f"handling the {self.what}'s output failed: {type(exc).__name__}: {exc}")
        except BaseException as exc:  # reading itself failed: drain the raw bytes to the end
            self.failed(f"reading the {self.what}'s output failed: {type(exc).__name__}: {exc}")
            self._discard()

    def _discard(self) -> None:
        try:
            fd = self.stream.fileno()
        except (OSError, ValueError):
            return
        while True:
            try:
                if not os.read(fd, 1 << 16):
                    return
            except InterruptedError:
                continue
            except OSError:
                return


@dataclass
class StageOutcome:
    exit_code: int
    interrupted: bool  # the host received SIGINT/SIGTERM while the stage ran
    killed: bool  # the grace period ran out (or a second signal came) and the group was killed
    seconds: float
    last_error: Optional[str]
    tail: list[str]


def ignore_further_stops() -> None:
    """A stop is under way or done (the host was signalled, or a stage exited interrupted because a supervisor
    signalled it first): SIGINT/SIGTERM copies arriving later, however late, change nothing up to this
    process's exit, so its exit status stays the 130 it reports. SIG_IGN, not a Python handler: Python puts
    its own handlers back to SIG_DFL while the interpreter shuts down, and a copy landing then killed `tt`
    with 143 after it had written 130. (A stopped `tt` starts no further stage, which would inherit it.)"""
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)


class SignalForwarder:
    """While a child process group runs, forward the host's SIGINT/SIGTERM to it.

    forward_as: the signal sent to the group (None: the one received).
    second_kills: a second stop request kills the group at once (else it is forwarded again).
    Signals within the window of the first are copies of it and ignored.
    After `grace` seconds from the first signal, the group is killed.
    """

    def __init__(self, process: subprocess.Popen, grace: float, forward_as: Optional[int] = signal.SIGTERM,
                 second_kills: bool = True):
        self.process, self.grace = process, grace
        self.forward_as, self.second_kills = forward_as, second_kills
        self.signalled = threading.Event()
        self.requests = StopRequests()
        self.killed = False
        self._previous: dict[int, Any] = {}
        self._deadline: Optional[float] = None
        self.time_limit: Optional[float] = None  # seconds from start after which the stage is stopped
        self.timed_out = False
        self._started = time.monotonic()

    def __enter__(self) -> "SignalForwarder":
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        stopped = self.signalled.is_set() or not self.timed_out and self.process.returncode in (
            EXIT_INTERRUPTED, -signal.SIGTERM, -signal.SIGINT)
        if stopped and self._previous:  # later copies of the stop change nothing, up to this process's exit
            ignore_further_stops()
            return
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _handle(self, signum: int, frame: object) -> None:
        verdict = self.requests.receive()
        if verdict == COPY:
            return
        if verdict == AGAIN and self.second_kills:
            self.kill()
            return
        if not self.signalled.is_set():
            self.signalled.set()
            self._deadline = time.monotonic() + self.grace
        self._send(self.forward_as or signum)

    def _send(self, sig: int) -> None:
        try:
            os.killpg(self.process.pid, sig)
        except ProcessLookupError:
            pass

    def kill(self) -> None:
        self.killed = True
        self._send(signal.SIGKILL)

    def wait(self, reader: Optional[threading.Thread] = None) -> int:
        """Wait for the process, killing its group once the grace period has passed.

        With the thread that reads the process's output, waiting wakes as soon as
        that output closes (the process exited) instead of on the next poll.
        """
        while self.process.poll() is None:
            if reader is not None and reader.is_alive():
                reader.join(timeout=0.1)
            else:
                time.sleep(0.01)
            if (self.time_limit is not None and not self.timed_out and not self.signalled.is_set()
                    and time.monotonic() - self._started > self.time_limit):
                self.timed_out = True  # stopped as a stop request stops it: SIGTERM, the grace period, SIGKILL
                self._deadline = time.monotonic() + self.grace
                self._send(signal.SIGTERM)
            if self._deadline is not None and time.monotonic() > self._deadline and self.process.poll() is None:
                self.kill()
        return self.process.wait()


def run_stage(
    python: Path,
    arguments: list[str] | str,
    request_path: Path,
    cwd: Path,
    log_path: Path,
    on_event: Callable[[dict[str, Any]], None],
    grace: Optional[float] = None,
    extra_env: Optional[dict[str, str]] = None,
    keep_fds: tuple[int, ...] = (),
    on_started: Optional[Callable[[int], None]] = None,
    time_limit: Optional[float] = None,
    warm: Optional[str] = None,
) -> StageOutcome:
    """Run one stage to its end. keep_fds: descriptors the stage inherits (the run lock);
    on_started: called with the stage's pid once it runs; time_limit: seconds after which the stage is stopped
    (SIGTERM, then SIGKILL after the grace period) and fails, exit 1, its error saying so; warm: the engine's
    stage-server module: with TT_STAGE_SERVER=1 a plain `-m MODULE` stage starts as a launcher that has the
    warm server fork it (tt_host.engines.stageserver), the same process group, signals, output and status."""
    started = time.monotonic()
    # -P and PYTHONSAFEPATH: nothing from the run folder (the stage's working folder) is importable
    env = python_env(PYTHONUNBUFFERED="1", TT_STAGE_REQUEST=str(request_path))
    env.update({HOST_PID_ENV: str(os.getpid()), STAGE_LOG_ENV: str(log_path)})
    env.update(extra_env or {})
    # The log is opened before the stage starts; never through a symlink (it could point anywhere).
    log = open(os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600), "a",
               encoding="utf-8")
    os.fchmod(log.fileno(), 0o600)
    command = [*(["-m", arguments] if isinstance(arguments, str) else arguments), str(request_path)]
    served = None
    if warm and len(command) == 3 and command[0] == "-m" and stageserver.enabled():  # a plain `-m MODULE`
        served = stageserver.connect(python, warm, env, log_path.parent / "stage-server.log")
    if served is not None:
        command = ["-m", stageserver.stagewire.LAUNCHER, *command[1:]]
        env[stageserver.stagewire.FD_ENV] = str(served.fileno())
        keep_fds = (*keep_fds, served.fileno())
    try:
        process = subprocess.Popen(
            python_command(python, command),
            cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True, bufsize=1, text=True, errors="replace",
            pass_fds=keep_fds,
        )
    except BaseException:
        log.close()
        raise
    finally:
        if served is not None:
            served.close()
    if on_started is not None:
        on_started(process.pid)
    last_error: Optional[str] = None
    tail: list[str] = []
    noise = NoiseFilter()
    with SignalForwarder(process, grace_seconds() if grace is None else grace) as forwarder:
        forwarder.time_limit = time_limit
        log_ok = True

        def handle(line: str) -> None:
            nonlocal last_error, log_ok
            if log_ok:
                try:
                    log.write(line if line.endswith("\n") else line + "\n")
                    log.flush()
                except Exception as exc:  # a full disk: keep reading, report once
                    log_ok = False
                    reader.failed(f"writing the stage log {log_path} failed: {exc}")
            event = parse_event(line)
            if event.get("raw") and noise.is_noise(line):  # in the log above; never on the terminal
                event = {**event, "level": "debug", "noise": True}
            elif event.get("raw") and line.strip():
                tail.append(line.rstrip())
                del tail[:-20]
            if event.get("type") == "log" and event.get("level") == "error":
                last_error = str(event.get("message", ""))
            on_event(event)

        assert process.stdout is not None
        reader = OutputReader(process.stdout, handle, "stage")  # bound before its thread can call `handle`
        reader.start()
        forwarder.wait(reader.thread)
        reader.finish()
    try:
        log.close()
    except OSError:  # the last buffered lines could not be written: reported already
        pass
    code = process.returncode
    if code < 0:  # killed by a signal
        code = EXIT_INTERRUPTED if forwarder.signalled.is_set() else 1
    if forwarder.timed_out and not forwarder.signalled.is_set():  # a failure, not an interruption
        code = 1
        last_error = (f"the stage was stopped after its time limit of {time_limit:g} s (evaluation.timeoutMs); resume the run to "
                      "run it again, or raise the limit")
    if reader.error is not None:  # the stage's output was not fully handled: never a silent success
        code = code or 1
        last_error = f"{reader.error}; the stage ran to its end (exit {process.returncode}): resume the run to retry"
    return StageOutcome(code, forwarder.signalled.is_set(), forwarder.killed, time.monotonic() - started, last_error, tail)
