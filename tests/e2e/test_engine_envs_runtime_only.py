"""Users' engine environments hold runtime packages only: `uv pip list` in the prepared foundation and
adapter environments (built from the source projects in this clone, as `tt run` builds them) shows no
pytest, httpx or openai (the engines' `dev` groups; transformers is in both runtime groups, the foundation's for
lm-eval's HFLM, `evaluation.benchmarks`). One
exception: huggingface_hub 1.x (the adapter's hub client) makes httpx its own HTTP library, so httpx may
be present exactly when the environment's huggingface_hub requires it.
The environments built from shipped locks are checked in test_install_from_wheels.py.

Duration: about a second per engine when scripts/test prepared the environments already, else one
environment build each (a few minutes, torch from the uv cache).
"""

from __future__ import annotations

import json
import subprocess

import pytest

from foundation_support import tt

from tt_host.engines.uv import uv_binary

DEV_ONLY = {"foundation": {"pytest", "pytest-timeout"}, "adapter": {"pytest", "httpx", "openai"}}
HUB_REQUIRES = ("import importlib.metadata as m\n"
                "try: print('\\n'.join(m.requires('huggingface_hub') or []))\n"
                "except m.PackageNotFoundError: pass")


def runtime_requirement_of_the_hub(python: str) -> set[str]:
    """The test tools that the environment's huggingface_hub itself requires (httpx since 1.0)."""
    lines = subprocess.run([python, "-c", HUB_REQUIRES], capture_output=True, text=True, check=True).stdout
    required = {line.split(";")[0].strip() for line in lines.splitlines() if "extra ==" not in line}
    return {name for name in ("httpx",) if any(r.lower().startswith(name) for r in required)}


@pytest.mark.parametrize("engine", sorted(DEV_ONLY))
def test_prepared_environment_has_runtime_packages_only(tmp_path, engine):
    proc = tt(tmp_path, "engines", "prepare", engine, "--json", timeout=1800)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    python = json.loads(proc.stdout)["python"]
    listing = subprocess.run([uv_binary(), "pip", "list", "--python", python, "--format", "json"],
                             capture_output=True, text=True, check=True).stdout
    names = {row["name"].lower() for row in json.loads(listing)}
    assert {"torch", f"tt-engine-{engine}", "tt-stagekit"} <= names, sorted(names)
    allowed = runtime_requirement_of_the_hub(python)
    assert not (DEV_ONLY[engine] | {"httpx", "openai"}) - allowed & names, sorted(names)
