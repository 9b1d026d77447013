"""A wait a person watches: a status line whose seconds count up on a terminal (host side; runs in tt's python).

`waiting(console, title)` is a context manager. On a terminal (the console's own: tt's notes go to stderr) it
shows the rich status line `TITLE · 12 s`, redrawn every second, so that a long step (an export loading and
merging weights, a model loading) is visibly alive; lines printed through the same console meanwhile appear
above it and the line is gone when the wait ends. Elsewhere (a pipe, a log, CI) it prints TITLE once.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Iterator

from rich.console import Console
from rich.markup import escape


@contextlib.contextmanager
def waiting(console: Console, title: str) -> Iterator[None]:
    if not console.is_terminal:
        console.print(title, markup=False, soft_wrap=True)
        yield
        return
    started, stopped = time.monotonic(), threading.Event()
    status = console.status(escape(title))

    def tick() -> None:
        while not stopped.wait(1.0):
            status.update(f"{escape(title)} · {time.monotonic() - started:.0f} s")

    status.start()
    threading.Thread(target=tick, daemon=True).start()
    try:
        yield
    finally:
        stopped.set()
        status.stop()
