"""Shared fixtures: run the real `tt` console script in a subprocess with isolated homes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from plugin_site import echo_site

REPO = Path(__file__).resolve().parents[1]
TT_BIN = shutil.which("tt", path=str(Path(sys.executable).parent)) or "tt"


def shared_envs_dir() -> str:
    """Engine environments are reused across tests (and sessions): building them is the slow part. The same folder
    as tt_host.engines.envs.envs_root (an empty XDG_CACHE_HOME counts as unset there too); the test environments
    that are not engine environments live under scripts/test-envs-root (docs/testing.md "Test environments")."""
    return os.environ.get("TT_ENVS_DIR") or str(Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tt" / "envs")


class TT:
    def __init__(self, env: dict[str, str], cwd: Path):
        self.env, self.cwd = env, cwd

    def __call__(self, *args: str, timeout: float = 900, check: bool | None = None, **kwargs) -> subprocess.CompletedProcess:
        proc = subprocess.run([TT_BIN, *map(str, args)], env=self.env, cwd=self.cwd, capture_output=True, text=True,
                              timeout=timeout, **kwargs)
        if check is not None and (proc.returncode == 0) != check:
            raise AssertionError(f"tt {' '.join(map(str, args))} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
        return proc

    def json(self, *args: str, **kwargs):
        proc = self(*args, "--json", **kwargs)
        try:
            return proc.returncode, json.loads(proc.stdout)
        except json.JSONDecodeError:
            raise AssertionError(f"not JSON (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")

    def popen(self, *args: str, **kwargs) -> subprocess.Popen:
        return subprocess.Popen([TT_BIN, *map(str, args)], env=self.env, cwd=self.cwd, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, **kwargs)


def base_env(tmp_path: Path, pythonpath: list[str]) -> dict[str, str]:
    env = dict(os.environ)
    env["TT_HOME"] = str(tmp_path / "tt-home")
    env.setdefault("TT_ENVS_DIR", shared_envs_dir())
    env["PYTHONPATH"] = os.pathsep.join(pythonpath)
    env.pop("TT_PLUGINS", None)
    env.pop("TT_DISABLE_PLUGINS", None)
    return env


# Modules that share one session-wide run (foundation_support.reference_run): under pytest-xdist they must
# run on the same worker, or each worker trains the reference again.
SHARED_MODULES = {
    "tests/e2e/test_foundation_recovery.py": "foundation-reference",
    "tests/e2e/test_foundation_operations.py": "foundation-reference",
}


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: ignored when xdist is not installed
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """`--dist loadfile` (scripts/test), with the modules of SHARED_MODULES as one unit: each worker takes whole
    modules, so a module fixture (a trained run, built wheels) is made once. (Marks and `--dist loadgroup`
    would say the same, but pytest 9.2 ignores the node ids xdist rewrites for them: pytest-xdist issue 1386.)"""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SharedModules(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = super()._split_scope(nodeid)
            return SHARED_MODULES.get(module, module)

    return SharedModules(config, log)


@pytest.fixture
def tt(tmp_path: Path) -> TT:
    """The `tt` command with the echo test engine installed and a private TT_HOME."""
    return TT(base_env(tmp_path, echo_site(tmp_path / "site")), tmp_path)


def write_spec(folder: Path, spec: dict, name: str = "tunedtensor.json") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(json.dumps(spec, indent=2))
    return path


def echo_spec(**echo) -> dict:
    return {
        "name": "capitals",
        "engine": "echo",
        "system_prompt": "Answer with the capital city.",
        "examples": [{"input": f"Capital of country {i}?", "output": f"City {i}"} for i in range(10)],
        "echo": echo,
    }



def registered_runs(tt: TT, spec: Path, folders: list[Path]) -> list[str]:
    """Run `spec` once into each folder (`tt run --resume FOLDER`); the ids of the models they registered."""
    ids: list[str] = []
    for folder in folders:
        code, out = tt.json("run", spec, "--resume", folder)
        assert code == 0, out
        ids += [m["id"] for m in out["report"]["models"]]
    return ids
