"""The open-file limit the server needs for its connection cap: raised at start, and the cap fitted under it.

Every connection is a file descriptor; a server that reaches the process's
limit (often 1024) can no longer accept, and asyncio then logs a traceback per
attempt. At start the soft limit is raised to the hard one. The descriptors
needed are the connections allowed, the listen backlog the event loop may
accept in one go before the cap closes the excess, and a reserve for the
model's files, threads and the log; a hard limit too small for that lowers the
cap (said once in the log), never the other way round.
"""

from __future__ import annotations

from typing import Callable

RESERVE = 128  # model files, the tokenizer, thread pipes, the listening socket, the log


def raise_soft_limit() -> int:
    """Raise RLIMIT_NOFILE's soft limit to its hard limit (where the platform has one); the soft limit now."""
    try:
        import resource
    except ImportError:  # not POSIX
        return 1 << 20
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return 1 << 20 if soft == resource.RLIM_INFINITY else soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    except (ValueError, OSError):
        return soft
    return wanted


def fitted_cap(max_connections: int, backlog: int, limit: int, log: Callable[[str], None]) -> int:
    """`max_connections`, lowered (and logged) to what `limit` descriptors leave after the backlog and reserve."""
    room = limit - backlog - RESERVE
    if max_connections <= room:
        return max_connections
    cap = max(1, room)
    log(f"--max-connections {max_connections} lowered to {cap}: the open-file limit is {limit} "
        f"(raise it with `ulimit -n`)")
    return cap
