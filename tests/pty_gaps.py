"""Run `tt ARGS` with stderr on a real pseudo-terminal and measure the silences a person would sit through.

`on_terminal` starts the command with its stderr (and, unless `stdout_pipe`, its stdout) on a pseudo-terminal
of 160 columns, reads what it draws as it comes and notes when each piece arrived. `Drawn.longest_gap` is the
longest stretch with nothing drawn between the command's start and its exit: every moment of it the command
was working (an environment build, an export), so it is a silence, whatever the machine's speed. Stdlib only.
"""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import time
from dataclasses import dataclass


@dataclass
class Drawn:
    code: int
    text: str  # escape sequences removed, carriage returns as newlines
    stdout: str  # with stdout_pipe: what went to the pipe
    times: list[float]  # seconds after the start at which each piece arrived, and the exit last

    @property
    def longest_gap(self) -> float:
        moments = [0.0, *self.times]
        return max(b - a for a, b in zip(moments, moments[1:]))


def on_terminal(command: list[str], env: dict[str, str], cwd, stdout_pipe: bool = False, timeout: float = 600) -> Drawn:
    master, slave = pty.openpty()
    started = time.monotonic()
    proc = subprocess.Popen(command, env=dict(env, COLUMNS="160", TERM="xterm"), cwd=cwd, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE if stdout_pipe else slave, stderr=slave)
    os.close(slave)
    chunks, times = [], []
    while time.monotonic() - started < timeout:
        ready, _, _ = select.select([master], [], [], 0.2)
        if not ready:
            if proc.poll() is not None:
                break
            continue
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the terminal's other side closed
            break
        if not data:
            break
        chunks.append(data)
        times.append(time.monotonic() - started)
    out = proc.stdout.read().decode() if stdout_pipe else ""
    code = proc.wait(timeout=60)
    times.append(time.monotonic() - started)
    os.close(master)
    text = b"".join(chunks).decode("utf-8", "replace")
    return Drawn(code, re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\r", "\n", text), out, times)
