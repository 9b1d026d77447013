"""The systemd unit shipped in examples/systemd (docs/operations.md): its settings, and `systemd-analyze
verify` where that command exists (it reports unknown keys and bad values as warnings, so any output fails)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
UNIT = REPO / "examples" / "systemd" / "tt-run.service"
HOST_GRACE_SECONDS = 120


def settings(text: str) -> dict[str, str]:
    found = {}
    for line in text.splitlines():
        match = re.match(r"^([A-Za-z]+)=(.*)$", line.strip())
        if match:
            found[match.group(1)] = match.group(2)
    return found


def test_unit_restarts_failures_but_not_invalid_input_and_waits_for_the_checkpoint():
    unit = settings(UNIT.read_text())
    assert unit["Restart"] == "on-failure"
    assert "2" in unit["RestartPreventExitStatus"].split()
    assert "130" in unit["SuccessExitStatus"].split()
    assert int(unit["TimeoutStopSec"]) > HOST_GRACE_SECONDS
    assert "--resume" in unit["ExecStart"]
    assert "enable-linger" in UNIT.read_text()
    assert "examples/systemd/tt-run.service" in (REPO / "docs" / "operations.md").read_text()


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_unit_passes_systemd_analyze_verify(tmp_path):
    home = tmp_path / "home"
    (home / "tt" / ".venv" / "bin").mkdir(parents=True)
    (home / "models" / "my-model").mkdir(parents=True)
    (home / "tt" / ".venv" / "bin" / "tt").symlink_to(Path(sys.executable).parent / "tt")
    unit = tmp_path / "tt-run.service"
    unit.write_text(UNIT.read_text().replace("%h", str(home)))  # verify checks that ExecStart exists
    proc = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=120)
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if "tt-run.service" in line]
    assert proc.returncode == 0 and not lines, proc.stdout + proc.stderr

    broken = tmp_path / "broken.service"  # the check can fail: a misspelt key is reported
    broken.write_text(unit.read_text().replace("TimeoutStopSec", "TimeoutStpSec"))
    proc = subprocess.run(["systemd-analyze", "verify", str(broken)], capture_output=True, text=True, timeout=120)
    assert "TimeoutStpSec" in proc.stdout + proc.stderr
