"""Progress of an engine environment build, read from uv's own output, and its display on a terminal.

uv prints, when its output is not a terminal (tt reads it through a pipe): `Resolved N packages`, then
`Downloading NAME (SIZE)` for each large download and ` Downloaded NAME` when it has arrived, `Prepared N
packages`, `Installed N packages` and one ` + NAME==VERSION` per package. `UvProgress.feed` turns those lines
into counts (packages downloaded of those announced, bytes downloaded of those announced, packages installed)
and `text()` into one line: `3 of 21 large packages, 0.8 GB of 3.9 GB downloaded (torch 526.6 MB…) · 40 s`.

`BuildDisplay` shows it while the build runs: on a terminal one status line redrawn in place (with a spinner
and the elapsed seconds, so a long download is visibly alive); elsewhere (a log, CI) one line per package
downloaded and one per phase. `tt run --json` and `--quiet` show nothing (`tt_host.runs.progress.QuietReporter`).
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from rich.console import Console

from tt_host.engines.torch_build import size_text
from tt_host.terminal import clean

UNITS = {"B": 1, "KiB": 1024, "MiB": 1024 ** 2, "GiB": 1024 ** 3, "kB": 1000, "MB": 1000 ** 2, "GB": 1000 ** 3}
_DOWNLOADING = re.compile(r"^\s*Downloading (\S+) \(([\d.]+)\s*([KMG]i?B|B|kB)\)")
_DOWNLOADED = re.compile(r"^\s*Downloaded (\S+)\s*$")
_COUNT = re.compile(r"^\s*(Resolved|Prepared|Installed|Audited) (\d+) packages?")
_ADDED = re.compile(r"^\s*\+ ([A-Za-z0-9_.-]+)==(\S+)")


@dataclass
class UvProgress:
    """What uv said so far."""

    started: float = field(default_factory=time.monotonic)
    resolved: Optional[int] = None
    prepared: Optional[int] = None
    installed: Optional[int] = None
    announced: dict[str, int] = field(default_factory=dict)  # package -> bytes, from `Downloading NAME (SIZE)`
    arrived: list[str] = field(default_factory=list)
    added: dict[str, str] = field(default_factory=dict)  # package -> version, from ` + NAME==VERSION`

    def feed(self, line: str) -> Optional[str]:
        """Take one line of uv's output; the event it was (for a line-by-line display), else None."""
        if match := _DOWNLOADING.match(line):
            name, number, unit = match.groups()
            self.announced[name] = int(float(number) * UNITS[unit])
            return f"downloading {name} ({size_text(self.announced[name])})"
        if (match := _DOWNLOADED.match(line)) and match.group(1) in self.announced:
            self.arrived.append(match.group(1))
            return f"downloaded {match.group(1)} · {self.text()}"
        if match := _COUNT.match(line):
            word, count = match.group(1), int(match.group(2))
            setattr(self, {"Resolved": "resolved", "Prepared": "prepared"}.get(word, "installed"), count)
            return f"{word.lower()} {count} packages"
        if match := _ADDED.match(line):
            self.added[match.group(1)] = match.group(2)
        return None

    @property
    def bytes_total(self) -> int:
        return sum(self.announced.values())

    @property
    def bytes_done(self) -> int:
        return sum(self.announced[name] for name in self.arrived)

    def text(self) -> str:
        seconds = f"{time.monotonic() - self.started:.0f} s"
        if self.installed is not None:
            return f"installed {self.installed} packages · {seconds}"
        if self.prepared is not None:
            return f"installing {self.prepared} packages · {seconds}"
        if self.announced:
            waiting = [n for n in self.announced if n not in self.arrived]
            largest = sorted(waiting, key=lambda n: -self.announced[n])[:2]
            pending = f" ({', '.join(f'{n} {size_text(self.announced[n])}' for n in largest)}…)" if largest else ""
            return (f"{len(self.arrived)} of {len(self.announced)} large packages, "
                    f"{size_text(self.bytes_done)} of {size_text(self.bytes_total)} downloaded{pending} · {seconds}")
        if self.resolved is not None:
            return f"resolved {self.resolved} packages; fetching · {seconds}"
        return f"resolving · {seconds}"


class BuildDisplay:
    """The build's progress on `console` (stderr): a status line on a terminal, else one line per event.
    A context manager giving `feed`, the `progress` callback of tt_host.engines.envs.ensure_env."""

    def __init__(self, console: Console, title: str):
        self.console, self.title, self.status = console, title, None
        self.uv = UvProgress()
        self.stopped = threading.Event()

    def __enter__(self) -> Callable[[str], None]:
        if self.console.is_terminal:
            self.status = self.console.status(self.title)
            self.status.start()
            # uv is silent while one large wheel downloads: the line's seconds still count up
            threading.Thread(target=self._tick, daemon=True).start()
        else:
            self.console.print(self.title, markup=False)
        return self.feed

    def _redraw(self) -> None:
        if self.status is not None:
            self.status.update(f"{self.title}: {clean(self.uv.text())}")

    def _tick(self) -> None:
        while not self.stopped.wait(1.0):
            self._redraw()

    def feed(self, line: str) -> None:
        event = self.uv.feed(line)
        if self.status is not None:
            self._redraw()
        elif event is not None:
            self.console.print(clean(event), markup=False, soft_wrap=True)

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        if self.status is not None:
            self.status.stop()
