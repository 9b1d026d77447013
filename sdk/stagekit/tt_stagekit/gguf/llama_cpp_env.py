"""The cached llama.cpp test environment (scripts/llama-cpp-env) and running a GGUF file in it (tests, bench).

`llama_cpp_python(repo)` builds llama-cpp-python from the registry's source archive once per machine and
version (under ~/.cache/tt/test-envs) and returns its python; a build that fails raises with the build log's
tail, so a test that needs it fails naming why instead of skipping. `run_gguf` runs llama_cpp_run.py there.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Mapping

RUNNER = Path(__file__).with_name("llama_cpp_run.py")


class LlamaCppUnavailable(RuntimeError):
    """llama-cpp-python could not be built or run here."""


def llama_cpp_python(repo: Path, timeout: float = 3600) -> Path:
    """The cached environment's python, built first when missing (scripts/llama-cpp-env)."""
    proc = subprocess.run([str(repo / "scripts" / "llama-cpp-env")], capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise LlamaCppUnavailable(f"scripts/llama-cpp-env failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


def run_gguf(python: Path, request: Mapping[str, Any], timeout: float = 600) -> dict[str, Any]:
    """What llama.cpp makes of `request` (see llama_cpp_run.py)."""
    with tempfile.TemporaryDirectory(prefix="tt-llama-cpp-") as tmp:
        path = Path(tmp) / "request.json"
        path.write_text(json.dumps(request), encoding="utf-8")
        proc = subprocess.run([str(python), "-P", str(RUNNER), str(path)], capture_output=True, text=True,
                              timeout=timeout)
    if proc.returncode != 0:
        raise LlamaCppUnavailable(f"llama.cpp failed on {request.get('gguf')} (exit {proc.returncode}):\n"
                                  f"{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])
