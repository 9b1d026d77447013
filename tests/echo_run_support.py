"""An echo test engine run seen from outside: how far its train stage got (its state.json) and the pids of that
stage's processes (through /proc). The run and stop tests in tests/host/runs/ and tests/host/cli/test_migrating_cli.py."""

from __future__ import annotations

import json
from pathlib import Path


def train_step(run: Path) -> int:
    try:
        return json.loads((run / "train" / "state.json").read_text())["step"]
    except (FileNotFoundError, json.JSONDecodeError):
        return 0


def stage_pids(run: Path) -> list[int]:
    """Pids of the echo train stage of this run (found through /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            cmd = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if entry.name.isdigit() and "tt_engine_echo.stages.train" in cmd and str(run) in cmd:
            found.append(int(entry.name))
    return found
