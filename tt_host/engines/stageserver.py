"""The host's side of the warm stage server (opt-in: TT_STAGE_SERVER=1; docs/operations.md "Stage server").

An engine that names a warm module (`Engine.stage_server`) can have its plain `python -P -m MODULE` stages forked
by a server that imported its heavy libraries once (tt_stagekit.stageserver), instead of each stage importing
them again. The host starts one server per engine environment and stage environment, in its own session, the
first time a stage asks for it, and keeps it for the life of this `tt` process: the server's identity is the
environment's python (its hashed folder, and the link's inode: a rebuilt environment never gets an old server),
the warm module and the stage environment less its per-stage variables (tt_stagekit.stagewire.PER_STAGE). A
server that exited, or whose control pair no longer takes a connection, is replaced.

No socket has a path: the host makes a socket pair per stage, hands one end to the server over the server's
control pair and the other to the stage's launcher (tt_stagekit.stagelaunch) as an inherited descriptor. When
this process dies the control pair closes (and the server's parent-death signal fires): the server ends once
its stages have. Host interpreter; never imports torch.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import socket
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from tt_host.engines.isolation import python_command
from tt_stagekit import stagewire
from tt_stagekit.signals import HOST_PID_ENV

ENABLE_ENV = "TT_STAGE_SERVER"


def enabled() -> bool:
    """Whether stages go through a warm server: TT_STAGE_SERVER=1 (anything else, or unset: off)."""
    return os.environ.get(ENABLE_ENV, "") == "1"


@dataclass
class Server:
    process: subprocess.Popen
    control: socket.socket

    def offer(self) -> Optional[socket.socket]:
        """A new connection to this server (the launcher's end), or None when the server is gone."""
        if self.process.poll() is not None:
            return None
        ours, theirs = stagewire.pair()
        try:
            stagewire.send(self.control, {"connection": 1}, [theirs.fileno()])
        except OSError:
            ours.close()
            return None
        finally:
            theirs.close()
        return ours

    def close(self) -> None:
        self.control.close()


_SERVERS: dict[tuple[str, ...], Server] = {}
_LOCK = threading.Lock()


def identity(python: Path, warm: str, env: dict[str, str]) -> tuple[str, ...]:
    """What a server is shared by: the environment's python (path and the inode of the file or link), the warm
    module, and the digest of the stage environment less its per-stage variables."""
    stat = os.lstat(python)
    shared = {name: value for name, value in env.items() if name not in stagewire.PER_STAGE}
    digest = hashlib.sha256(json.dumps(sorted(shared.items())).encode("utf-8")).hexdigest()
    return (str(python), f"{stat.st_dev}:{stat.st_ino}:{stat.st_mtime_ns}", warm, digest)


def connect(python: Path, warm: str, env: dict[str, str], log_path: Path) -> Optional[socket.socket]:
    """The launcher's end of a connection to the warm server for (python, warm, env), starting or replacing the
    server as needed; None when none can be started (the stage then starts the plain way)."""
    key = identity(python, warm, env)
    with _LOCK:
        server = _SERVERS.get(key)
        conn = server.offer() if server is not None else None
        if conn is None:
            if server is not None:  # stale or crashed: replaced
                server.close()
                _SERVERS.pop(key, None)
            try:
                server = start(python, warm, env, log_path)
            except OSError:
                return None
            _SERVERS[key] = server
            conn = server.offer()
        return conn


def start(python: Path, warm: str, env: dict[str, str], log_path: Path) -> Server:
    """Start a server in its own session; its output goes to `log_path` (appended, never through a link)."""
    ours, theirs = stagewire.pair()
    server_env = {name: value for name, value in env.items() if name not in stagewire.PER_STAGE}
    server_env.update({HOST_PID_ENV: str(os.getpid()), stagewire.FD_ENV: str(theirs.fileno())})
    log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        process = subprocess.Popen(
            python_command(python, ["-m", stagewire.SERVER, warm]), cwd="/", env=server_env,
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, pass_fds=(theirs.fileno(),))
    except OSError:
        ours.close()
        raise
    finally:
        theirs.close()
        os.close(log)
    return Server(process, ours)


def server_pids() -> list[int]:
    """The pids of the servers this process started (for tests and `tt` diagnostics)."""
    return [server.process.pid for server in _SERVERS.values()]


@atexit.register
def _close_all() -> None:
    """This process is exiting: close every control pair, so each server ends once its stages have."""
    for server in _SERVERS.values():
        server.close()
