"""tt installed from wheels alone, the way users install it, outside any clone.

Every distribution is built by `uv build --wheel` into one folder; `uv tool install tuned-tensor --with
tt-engine-foundation` installs the host and the engine from that folder plus the package index into a
fresh tool environment (private UV_TOOL_DIR), and everything runs from a temporary folder. The engine has
no source project there, so its environment is built from the lock its wheel ships (torch comes from the
warm uv cache), and a tiny CPU run completes. The same for a `tt engines new` scaffold added with
`tt engines install`. Engine environments hold runtime packages only (no pytest, httpx, openai).

Duration: about 4-6 minutes on 2 loaded cores (wheels ~40 s, the foundation environment from its lock
~2-3 min, the runs ~30 s each).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from foundation_support import REPO, tiny_spec

from tt_host.engines.uv import uv_binary

PROJECTS = {".": "tuned-tensor", "sdk/stagekit": "tt-stagekit", "plugins/foundation": "tt-engine-foundation",
            "plugins/adapter": "tt-engine-adapter", "plugins/observer-csv": "tt-observer-csv"}
ENGINE_LOCKS = {"tt-engine-foundation": "plugins/foundation/tt_engine_foundation/pylock.runtime.toml",
                "tt-engine-adapter": "plugins/adapter/tt_engine_adapter/pylock.runtime.toml"}
TEST_TOOLS = ("pytest", "httpx", "openai")
# huggingface_hub 1.x (the adapter's hub client) uses httpx as its own HTTP library: in the adapter's
# lock httpx is a runtime requirement, not a test tool.
RUNTIME_IN = {"tt-engine-adapter": ("httpx",)}


def sh(*args, env=None, cwd=None, timeout=900) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(a) for a in args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{args} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def installed(python: Path) -> dict[str, str]:
    out = sh(uv_binary(), "pip", "list", "--python", python, "--format", "json").stdout
    return {row["name"].lower(): row["version"] for row in json.loads(out)}


def metadata(wheel: Path) -> tuple[str, str, list[str]]:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        lines = archive.read(name).decode().splitlines()
    field = lambda key: [line.split(": ", 1)[1] for line in lines if line.startswith(f"{key}: ")]
    return field("Name")[0], field("Version")[0], field("Requires-Dist")


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheels")
    for project in PROJECTS:
        sh(uv_binary(), "build", "--wheel", "--quiet", "--out-dir", out, REPO / project, cwd=out)
    return out


def test_every_wheel_resolves_from_an_index(wheels):
    built = {metadata(w)[0]: (w, *metadata(w)[1:]) for w in wheels.glob("*.whl")}
    assert set(built) == set(PROJECTS.values()), sorted(built)
    versions = {name: version for name, (_, version, _) in built.items()}
    for name, (wheel, _, requires) in built.items():
        for line in requires:
            requirement = Requirement(line)
            assert requirement.url is None, f"{name} has a path/URL dependency in its metadata: {line}"
            if requirement.name in versions:  # our own distributions: pinned to a range that holds the built one
                assert str(requirement.specifier) and requirement.specifier.contains(versions[requirement.name]), line
    for name, lock in ENGINE_LOCKS.items():
        with zipfile.ZipFile(built[name][0]) as archive:
            shipped = archive.read(lock.split("/", 2)[2])
        assert shipped == (REPO / lock).read_bytes(), f"{name} ships a lock other than {lock}"
        forbidden = [tool for tool in TEST_TOOLS + ("tt-stagekit",) if tool not in RUNTIME_IN.get(name, ())]
        assert not any(f'name = "{tool}"'.encode() in shipped for tool in forbidden), name


@pytest.fixture(scope="module")
def tool(wheels, tmp_path_factory):
    """`uv tool install tuned-tensor --with tt-engine-foundation` into a private tool dir; cwd outside the repo."""
    root = tmp_path_factory.mktemp("tool")
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "TT_PLUGINS", "TT_DISABLE_PLUGINS", "PYTHONDONTWRITEBYTECODE")}
    env.update(UV_TOOL_DIR=str(root / "tools"), UV_TOOL_BIN_DIR=str(root / "bin"), TT_HOME=str(root / "tt-home"),
               TT_ENVS_DIR=str(root / "envs"), TT_NUM_THREADS="1")
    # The built wheels stand in for the package index every uv call sees, as PyPI would for a user: a
    # scaffolded engine depends on tt-stagekit and locks it from there (tt_host.engines.scaffold).
    env["UV_FIND_LINKS"] = str(wheels)
    cwd = root / "work"
    cwd.mkdir()
    sh(uv_binary(), "tool", "install", "--quiet", "--python", getattr(sys, "_base_executable", sys.executable),
       "--find-links", wheels, "tuned-tensor", "--with", "tt-engine-foundation", env=env, cwd=cwd)
    return {"env": env, "cwd": cwd, "tt": root / "bin" / "tt", "python": root / "tools" / "tuned-tensor" / "bin" / "python"}


def tt(tool, *args, timeout=900) -> dict:
    out = sh(tool["tt"], *args, "--json", env=tool["env"], cwd=tool["cwd"], timeout=timeout).stdout
    return json.loads(out)


def run_completes(tool, spec: Path, engine: str) -> dict:
    result = tt(tool, "run", spec, "--device", "cpu", timeout=1200)
    report = json.loads((Path(result["run_dir"]) / "report.json").read_text())
    assert report["status"] == "completed" and report["engine"] == engine, report
    return report


def prepared_from_lock(tool, engine: str) -> Path:
    listing = {row["name"]: row for row in tt(tool, "engines", "list")["engines"]}
    row = listing[engine]
    assert row["error"] is None and not row["env_ready"], row  # ready to prepare, from the shipped lock
    assert row["runtime_source"].endswith("pylock.runtime.toml") and not row["runtime_source"].startswith(str(REPO))
    built = tt(tool, "engines", "prepare", engine, timeout=1800)
    assert built["built"] and built["key"] == row["env_key"], built
    marker = json.loads((Path(built["path"]) / ".tt-env-complete.json").read_text())
    assert marker["source"] == "lock", marker
    return Path(built["python"])


def test_foundation_from_wheels_prepares_from_its_shipped_lock_and_runs(tool, tmp_path):
    where = sh(tool["python"], "-c", "import tt_host, tt_engine_foundation, tt_stagekit as s; "
               "print(tt_host.__file__, tt_engine_foundation.__file__, s.__file__)", cwd=tool["cwd"]).stdout.split()
    assert all(not path.startswith(str(REPO)) for path in where), where

    python = prepared_from_lock(tool, "foundation")
    packages = installed(python)
    assert not set(TEST_TOOLS) & set(packages), sorted(packages)  # transformers is runtime now (lm-eval)
    assert {"torch", "tt-engine-foundation", "tt-stagekit"} <= set(packages)
    engine_file = sh(python, "-c", "import tt_engine_foundation; print(tt_engine_foundation.__file__)").stdout
    assert engine_file.startswith(str(python.parents[1])), engine_file  # its own copy, not the repo's

    spec = tiny_spec(tmp_path / "spec", pretrain_steps=12, checkpoint_interval_steps=12, warmup_steps=2,
                     finetune_steps=2)
    report = run_completes(tool, spec, "foundation")
    assert report["metrics"]["pretrain.steps"] == 12


def test_scaffold_installed_with_tt_engines_install_runs(tool, tmp_path):
    made = tt(tool, "engines", "new", "demo", tmp_path / "tt-engine-demo")
    assert made["locked"] and "tt_engine_demo/pylock.runtime.toml" in made["files"], made
    assert tt(tool, "engines", "install", tmp_path / "tt-engine-demo")["installer"] == "uv tool"

    python = prepared_from_lock(tool, "demo")
    packages = installed(python)
    assert "textdistance" in packages and "tt-engine-demo" in packages and not set(TEST_TOOLS) & set(packages)
    spec = tmp_path / "tunedtensor.json"
    spec.write_text(json.dumps({
        "name": "capitals", "engine": "demo", "system_prompt": "Answer with the capital city.",
        "examples": [{"input": f"Capital of country {i}?", "output": f"City {i}"} for i in range(10)],
        "demo": {"steps": 2}}))
    assert run_completes(tool, spec, "demo")["metrics"]["train.passes"] == 2

    assert tt(tool, "engines", "uninstall", "demo")["ok"]
    assert "demo" not in {row["name"] for row in tt(tool, "engines", "list")["engines"]}
