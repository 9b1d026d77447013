"""The stage server: an engine's heavy libraries imported once, one forked process per stage (opt-in,
TT_STAGE_SERVER=1; docs/operations.md "Stage server"). Engine environment, stdlib only apart from what it warms.

`python -P -m tt_stagekit.stageserver WARM_MODULE`, started by the host (tt_host.engines.stageserver) in its own
session, with its end of a control socket pair named by TT_STAGE_SERVER_FD (tt_stagekit.stagewire). It imports
WARM_MODULE, whose `SERVED_STAGES` is the fixed list of stage modules it runs (anything else is refused: the
launcher then starts the stage the plain way), then waits, single-threaded, so that every fork is safe:

- the control pair brings one connection per stage (the host made the pair; the launcher holds the other end);
- a connection's first packet is the launcher's request: a stage module, its arguments, the environment, the
  working folder, the umask and the launcher's open descriptors (stdin/stdout/stderr, the run lock). The server
  forks; the child takes them (same numbers), starts its own session and runs the module as `python -m` would
  (`runpy`, `__main__`), exiting with its status. The launcher learns the pid (and a pidfd);
- later packets ask for a signal, sent to the stage's process group; the child's exit status is sent back and
  the connection closed. A connection that closes first (its launcher died) gets the stage's group SIGKILLed.

The host's death (the control pair closing, or SIGTERM from PR_SET_PDEATHSIG) ends the server once its stages
have ended: each one's launcher relays the stop tt's death sends it, as a plain stage gets it.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import io
import os
import runpy
import selectors
import signal
import socket
import sys
import traceback
from typing import Any, Optional

from tt_stagekit import signals, stagewire

STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGKILL)
_CONNECTIONS: list["Connection"] = []  # every open launcher connection (a forked child detaches them all)


class Connection:
    """One launcher's connection, and the stage it asked for once forked."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.pid: Optional[int] = None

    def answer(self, message: dict[str, Any], fds: tuple[int, ...] = ()) -> None:
        try:
            stagewire.send(self.sock, message, fds)
        except OSError:  # the launcher is gone; its EOF is handled by the loop
            pass

    def signal(self, sig: int) -> None:
        if self.pid is None:
            return
        for send in (os.killpg, os.kill):  # its own group, once the child has made it
            try:
                send(self.pid, sig)
                return
            except ProcessLookupError:
                continue


def check_request(request: dict[str, Any], fds: list[int], allowed: frozenset[str]) -> str:
    """Why the request is refused ("" when it is a stage this server runs, spelled as data only)."""
    module, argv, env = request.get("module"), request.get("argv"), request.get("env")
    if module not in allowed:
        return f"stage module {module!r} is not one this server runs"
    if not isinstance(argv, list) or not all(isinstance(arg, str) for arg in argv):
        return "argv must be a list of strings"
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        return "env must map strings to strings"
    if not isinstance(request.get("cwd"), str) or not isinstance(request.get("umask"), int):
        return "cwd and umask are required"
    numbers = request.get("fds")
    if (not isinstance(numbers, list) or len(numbers) != len(fds) or not all(isinstance(n, int) and n >= 0
                                                                              for n in numbers)
            or len(set(numbers)) != len(numbers) or not {0, 1, 2} <= set(numbers)):
        return "fds must number each attached descriptor once, 0, 1 and 2 among them"
    return ""


_KEPT: list[Any] = []  # the server's objects over descriptors the child closed: never finalized (os._exit)


def run_child(request: dict[str, Any], fds: list[int], server: "Server") -> None:
    """In the forked child: become the stage as `python -P -m MODULE ARGS` would start it; never returns."""
    code: Any = 1
    try:
        os.setsid()  # its own session and group, as the host starts a stage
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGTERM, signal.SIGCHLD):  # as a fresh interpreter has them
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        server.forget()
        place_descriptors(list(zip(request["fds"], fds)))
        os.chdir(request["cwd"])
        os.umask(request["umask"])
        os.environ.clear()
        os.environ.update(request["env"])
        os.environ[signals.SERVED_BY_ENV] = str(os.getppid())
        reopen_standard_streams()
        sys.argv = [request["module"], *request["argv"]]
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = exc.code
    except KeyboardInterrupt:  # as the interpreter does with an uncaught one: die of SIGINT
        finish()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    except BaseException:  # noqa: B902 - an uncaught error: its traceback and exit 1, as `python -m` ends
        traceback.print_exc()
        code = 1
    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    finish()
    os._exit(code & 0xFF)


def finish() -> None:
    """What the interpreter does at exit that the stage can see: atexit functions, flushed streams."""
    try:
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - a closed pipe at exit is the stage's own business
                pass


def place_descriptors(pairs: list[tuple[int, int]]) -> None:
    """Each received descriptor at the number the launcher had it; every other descriptor closed."""
    base = max([fd for pair in pairs for fd in pair] + [2]) + 1
    moved = [(number, os.dup(fd) if fd >= base else _dup_above(fd, base)) for number, fd in pairs]
    for number, fd in moved:
        os.dup2(fd, number, inheritable=True)
    keep = {number for number, _ in pairs}
    for name in os.listdir("/proc/self/fd" if os.path.isdir("/proc/self/fd") else "/dev/fd"):
        if int(name) not in keep:
            try:
                os.close(int(name))
            except OSError:
                pass


def _dup_above(fd: int, base: int) -> int:
    import fcntl

    return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, base)


def reopen_standard_streams() -> None:
    """sys.stdin/stdout/stderr on the stage's descriptors, made as the interpreter makes them (the server's
    interpreter started with the same PYTHONUNBUFFERED: unbuffered and write-through, else buffered with a
    line-buffered stderr). The server's own stream objects are kept, never finalized: they would close 0-2."""
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        old = getattr(sys, f"__{name}__") or getattr(sys, name)
        _KEPT.append(old)
        if fd == 0:
            stream = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)), old.encoding, old.errors)
        elif os.environ.get("PYTHONUNBUFFERED"):
            stream = io.TextIOWrapper(io.FileIO(fd, "w", closefd=False), old.encoding, old.errors,
                                      write_through=True)
        else:
            stream = io.TextIOWrapper(io.BufferedWriter(io.FileIO(fd, "w", closefd=False)), old.encoding,
                                      old.errors, line_buffering=fd == 2)
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


class Server:
    """The loop: the control pair, the launchers' connections and the children's exits, on one thread."""

    def __init__(self, control: socket.socket, allowed: frozenset[str]):
        self.control, self.allowed = control, allowed
        self.selector = selectors.DefaultSelector()
        self.wake_read, wake_write = os.pipe()
        for fd in (self.wake_read, wake_write):
            os.set_blocking(fd, False)
        signal.set_wakeup_fd(wake_write)
        for sig in (signal.SIGCHLD, signal.SIGTERM):
            signal.signal(sig, lambda signum, frame: None)  # the wakeup pipe carries it to the loop
        self.selector.register(control, selectors.EVENT_READ, "control")
        self.selector.register(self.wake_read, selectors.EVENT_READ, "wake")
        self.children: dict[int, Optional[Connection]] = {}  # None: its launcher is gone
        self.draining = False
        self.wake_write = wake_write

    def forget(self) -> None:
        """In a forked child: let go of the server's descriptors without their objects closing them later."""
        self.selector.close()
        for sock in (self.control, *(conn.sock for conn in _CONNECTIONS)):
            _KEPT.append(sock)
            if sock.fileno() >= 0:
                sock.detach()

    def serve(self) -> None:
        while not (self.draining and not self.children):
            for key, _ in self.selector.select(timeout=1.0):
                if key.data == "control":
                    self.accept()
                elif key.data == "wake":
                    self.woken()
                else:
                    self.readable(key.data)
            if not signals.host_alive():  # the parent-death signal failed or came before it was set
                self.drain()
            self.reap()

    def drain(self) -> None:
        """The host is gone: take no more stages, end once the running ones have ended."""
        if not self.draining:
            self.draining = True
            self.selector.unregister(self.control)
            self.control.close()

    def accept(self) -> None:
        try:
            message, fds = stagewire.receive(self.control)
        except (ValueError, OSError):
            return
        if message is None:
            return self.drain()
        for fd in fds:
            try:
                sock = socket.socket(fileno=fd)
            except OSError:
                os.close(fd)
                continue
            if sock.type != socket.SOCK_SEQPACKET or self.draining:
                sock.close()
                continue
            conn = Connection(sock)
            _CONNECTIONS.append(conn)
            self.selector.register(sock, selectors.EVENT_READ, conn)

    def woken(self) -> None:
        try:
            data = os.read(self.wake_read, 512)
        except BlockingIOError:
            return
        if signal.SIGTERM in data:
            self.drain()

    def readable(self, conn: Connection) -> None:
        try:
            message, fds = stagewire.receive(conn.sock)
        except ValueError as exc:
            return self.close(conn, refused=f"a malformed request: {exc}")
        except OSError:
            message, fds = None, []
        if message is None:  # the launcher died: its stage dies with it
            conn.signal(signal.SIGKILL)
            return self.close(conn)
        if conn.pid is None:
            return self.start(conn, message, fds)
        stagewire.close_all(fds)
        sig = message.get("signal")
        if sig in STOPS:
            conn.signal(sig)

    def start(self, conn: Connection, request: dict[str, Any], fds: list[int]) -> None:
        reason = check_request(request, fds, self.allowed) or ("the server is stopping" if self.draining else "")
        if reason:
            stagewire.close_all(fds)
            return self.close(conn, refused=reason)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            run_child(request, fds, self)
        stagewire.close_all(fds)
        conn.pid = pid
        self.children[pid] = conn
        pidfd = _pidfd(pid)
        conn.answer({"pid": pid}, (pidfd,) if pidfd is not None else ())
        if pidfd is not None:
            os.close(pidfd)

    def reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            if conn is not None and conn.pid == pid:
                code, sig = stagewire.exit_status(status)
                conn.answer({"exit": code, "signal": sig})
                conn.pid = None
                self.close(conn)

    def close(self, conn: Connection, refused: str = "") -> None:
        if refused:
            conn.answer({"refused": refused})
        if conn.pid is not None:  # the stage still runs: its exit is reaped, nobody is told
            self.children[conn.pid] = None
        try:
            self.selector.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        if conn in _CONNECTIONS:
            _CONNECTIONS.remove(conn)
        conn.sock.close()


def _pidfd(pid: int) -> Optional[int]:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -P -m tt_stagekit.stageserver WARM_MODULE", file=sys.stderr)
        return 2
    control = socket.socket(fileno=int(os.environ.pop(stagewire.FD_ENV)))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is tt's to forward
    signals._parent_death_signal(signal.SIGTERM)
    if not signals.host_alive():
        return 0
    warm = importlib.import_module(argv[0])
    allowed = frozenset(getattr(warm, "SERVED_STAGES", ()))
    gc.collect()
    gc.freeze()  # what the warm import made stays shared with every child (no copy on the next collection)
    print(f"stage server {os.getpid()}: {argv[0]} imported, serving {len(allowed)} stage modules", file=sys.stderr)
    Server(control, allowed).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
