"""The stage server's wire (docs/operations.md "Stage server"): one JSON object per packet, open descriptors
attached. Stdlib only; used by the host (which makes the socket pairs), the launcher and the server.

Every connection is an AF_UNIX SOCK_SEQPACKET socket pair made by the host (`pair`), never a path in the file
system, so no other process can reach a server: the host hands one end to the server over the server's
control pair and the other to the stage's launcher (`python -P -m tt_stagekit.stagelaunch`) as an inherited
descriptor named by `FD_ENV`. A packet holds one message (`send`/`receive`), its descriptors as SCM_RIGHTS.
"""

from __future__ import annotations

import json
import os
import socket
from typing import Any, Optional, Sequence

FD_ENV = "TT_STAGE_SERVER_FD"  # the launcher's (or the server's control) end of its socket pair
LAUNCHER = "tt_stagekit.stagelaunch"
SERVER = "tt_stagekit.stageserver"
MAX_MESSAGE = 1 << 20  # a request carries the stage's environment: far below this
MAX_FDS = 64
# Variables that differ from one stage to the next and are read at run time, never at import: a server is
# shared by stages whose environments are otherwise equal (tt_host.engines.stageserver keys servers by the rest).
PER_STAGE = ("TT_STAGE_REQUEST", "TT_STAGE_LOG", "TT_HOST_PID", FD_ENV)


def pair() -> tuple[socket.socket, socket.socket]:
    """A connected pair only its holders can use (not inheritable until passed on purpose)."""
    return socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)


def send(sock: socket.socket, message: dict[str, Any], fds: Sequence[int] = ()) -> None:
    data = json.dumps(message).encode("utf-8")
    if len(data) > MAX_MESSAGE:
        raise OSError(f"stage server message of {len(data)} bytes is over {MAX_MESSAGE}")
    if fds:
        socket.send_fds(sock, [data], list(fds))
    else:
        sock.send(data)


def receive(sock: socket.socket) -> tuple[Optional[dict[str, Any]], list[int]]:
    """The next message and its descriptors; (None, []) at the end of the connection. A packet that is not one
    whole JSON object (truncated, too many descriptors, not JSON) raises ValueError, its descriptors closed."""
    data, fds, flags, _ = socket.recv_fds(sock, MAX_MESSAGE + 1, MAX_FDS)
    if not data and not fds:
        return None, []
    try:
        if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC) or len(data) > MAX_MESSAGE:
            raise ValueError("a truncated message")
        message = json.loads(data.decode("utf-8"))
        if not isinstance(message, dict):
            raise ValueError("a message that is not a JSON object")
    except (ValueError, UnicodeDecodeError) as exc:
        close_all(fds)
        raise ValueError(str(exc)) from None
    return message, fds


def close_all(fds: Sequence[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def exit_status(status: int) -> tuple[int, int]:
    """A waitpid status as (exit code, 0) or (0, killing signal)."""
    if os.WIFSIGNALED(status):
        return 0, os.WTERMSIG(status)
    return (os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1), 0
