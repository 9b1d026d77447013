"""The stage launcher: the process tt starts for a stage when the stage server is on (TT_STAGE_SERVER=1;
docs/operations.md "Stage server"). Engine environment, stdlib only: it starts in tens of milliseconds.

`python -P -m tt_stagekit.stagelaunch MODULE ARGS...`, started by the host exactly as a plain stage (its own
session, stdout/stderr on tt's pipe, the run lock inherited), with TT_STAGE_SERVER_FD naming its end of a
socket pair whose other end the host gave the warm server (tt_stagekit.stagewire). It sends the server the
stage module, its arguments, its environment, working folder, umask and open descriptors; the server forks the
stage, which takes them over. Then the launcher stands for the stage: SIGINT/SIGTERM it receives (tt's
forwarded stop, a supervisor's, or PR_SET_PDEATHSIG when tt dies) are relayed to the stage's group, and it
exits with the stage's status (dying of the same signal when the stage was killed). When it dies (tt's
SIGKILL after the grace period), the server kills the stage's group.

When the server refuses the request (a stage module it does not run) or cannot be reached before the stage
has started, the launcher becomes the plain stage (`exec python -P -m MODULE ARGS`: same pid, group and
descriptors), noting why on stdout as a log event.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import sys
from typing import NoReturn, Optional

from tt_stagekit import signals, stagewire

RELAYED = (signal.SIGINT, signal.SIGTERM)


def open_descriptors(exclude: int) -> list[int]:
    """This process's open descriptors (stdin/stdout/stderr, the run lock ...), less `exclude`."""
    folder = "/proc/self/fd" if os.path.isdir("/proc/self/fd") else "/dev/fd"
    found = []
    for name in os.listdir(folder):
        fd = int(name)
        if fd == exclude:
            continue
        try:
            os.fstat(fd)
        except OSError:  # the listing's own descriptor, closed by now
            continue
        found.append(fd)
    return sorted(found)


def note(message: str, level: str) -> None:
    """A log event on stdout (the stage's output, read by tt)."""
    try:
        os.write(1, (json.dumps({"type": "log", "level": level, "message": message}) + "\n").encode("utf-8"))
    except OSError:
        pass


def plain(module: str, argv: list[str], why: str, level: str = "info") -> NoReturn:
    """Become the stage the plain way, as tt starts it without the server (a refused module is expected: its
    note is at debug level, in the stage log only)."""
    note(f"stage server: {why}; the stage starts on its own", level)
    signal.set_wakeup_fd(-1)
    for sig in RELAYED:
        signal.signal(sig, signal.SIG_DFL)
    os.execv(sys.executable, [sys.executable, "-P", "-m", module, *argv])


def end(code: int, sig: int) -> NoReturn:
    """Exit as the stage did: with its code, or killed by its signal."""
    if sig:
        signal.set_wakeup_fd(-1)
        signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
        os.kill(os.getpid(), sig)
    os._exit(code if not sig else 1)


class Launcher:
    """Stands for one served stage: relays stops, reports its end."""

    def __init__(self, sock: socket.socket, module: str, argv: list[str]):
        self.sock, self.module, self.argv = sock, module, argv
        self.pid: Optional[int] = None
        self.pidfd: Optional[int] = None
        self.wake_read, wake_write = os.pipe()
        for fd in (self.wake_read, wake_write):
            os.set_blocking(fd, False)
        signal.set_wakeup_fd(wake_write)
        for sig in RELAYED:
            signal.signal(sig, lambda signum, frame: None)  # the wakeup pipe carries it to the loop
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.wake_read, selectors.EVENT_READ, "wake")
        self.selector.register(sock, selectors.EVENT_READ, "server")

    def run(self, request: dict, fds: list[int]) -> NoReturn:
        try:
            stagewire.send(self.sock, request, fds)
        except OSError as exc:
            plain(self.module, self.argv, f"the server cannot be reached ({exc})")
        while True:
            for key, _ in self.selector.select():
                if key.data == "wake":
                    self.relay(os.read(self.wake_read, 512))
                elif key.data == "server":
                    self.answered()
                else:  # the pidfd: the stage exited after the server died
                    self.orphaned_end()

    def relay(self, received: bytes) -> None:
        for sig in received:
            if sig not in RELAYED:
                continue
            if self.pid is None:  # the stage has not started: stop as a plain stage still importing would
                end(1, sig)
            try:
                if self.pidfd is not None and "server" not in self.registered():
                    signal.pidfd_send_signal(self.pidfd, sig)
                else:
                    stagewire.send(self.sock, {"signal": sig})
            except OSError:
                pass

    def registered(self) -> set[str]:
        return {key.data for key in self.selector.get_map().values()}

    def answered(self) -> None:
        try:
            message, fds = stagewire.receive(self.sock)
        except (ValueError, OSError):
            message, fds = None, []
        if message is None:
            return self.server_gone()
        if "refused" in message and self.pid is None:
            plain(self.module, self.argv, f"the server refused the stage ({message['refused']})", "debug")
        if "pid" in message and self.pid is None:
            self.pid = int(message["pid"])
            self.pidfd = fds.pop(0) if fds else None
            note(f"stage server: the stage runs as pid {self.pid}, forked by the warm server", "debug")
        stagewire.close_all(fds)
        if "exit" in message:
            end(int(message["exit"]), int(message.get("signal") or 0))

    def server_gone(self) -> None:
        """The server died with the stage running (the stage gets its own parent-death SIGTERM and stops):
        wait for the stage to end when a pidfd allows it, then fail, saying so."""
        if self.pid is None:
            plain(self.module, self.argv, "the server closed the connection")
        sys.stderr.write(f"tt: the stage server ended while stage process {self.pid} ran; the stage fails\n")
        sys.stderr.flush()
        self.selector.unregister(self.sock)
        if self.pidfd is None:
            os._exit(1)
        self.selector.register(self.pidfd, selectors.EVENT_READ, "stage")

    def orphaned_end(self) -> NoReturn:
        os._exit(1)


def main(argv: list[str]) -> NoReturn:
    if not argv:
        sys.stderr.write("usage: python -P -m tt_stagekit.stagelaunch MODULE [ARGS...]\n")
        os._exit(2)
    module, rest = argv[0], argv[1:]
    number = os.environ.pop(stagewire.FD_ENV, "")
    if not number.isdigit():
        plain(module, rest, "no server connection")
    sock = socket.socket(fileno=int(number))
    sock.set_inheritable(False)
    fds = open_descriptors(exclude=sock.fileno())
    umask = os.umask(0o077)
    os.umask(umask)
    request = {"module": module, "argv": rest, "env": dict(os.environ), "cwd": os.getcwd(), "umask": umask,
               "fds": fds}
    launcher = Launcher(sock, module, rest)
    # tt's death (SIGKILL, OOM) reaches this process as SIGTERM, relayed to the stage as a plain stage gets it
    signals._parent_death_signal(signal.SIGTERM)
    if not signals.host_alive():
        os.kill(os.getpid(), signal.SIGTERM)
    launcher.run(request, fds)


if __name__ == "__main__":
    main(sys.argv[1:])
