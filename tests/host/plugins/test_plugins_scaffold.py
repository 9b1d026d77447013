"""`tt engines new`: the generated package installs into a fresh virtual environment next to tt and works.

The fresh environment is made with `uv venv` + `uv pip install -e` (the same
as `python -m venv` + `pip install -e`, but seconds instead of a minute on a
shared machine: uv reuses its wheel cache).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import REPO, base_env

from tt_host.engines.uv import uv_binary

HOST_TT = shutil.which("tt", path=str(Path(sys.executable).parent)) or "tt"


def sh(*args, env=None, cwd=None, timeout=600) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(a) for a in args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{args} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def test_new_package_installs_next_to_tt_and_runs(tmp_path):
    env = base_env(tmp_path, [])
    env.pop("PYTHONPATH")
    env.pop("VIRTUAL_ENV", None)
    made = json.loads(sh(HOST_TT, "engines", "new", "demo", tmp_path / "tt-engine-demo", "--json", env=env).stdout)
    package = Path(made["path"])
    assert made["locked"] and (package / "uv.lock").is_file(), made
    shipped = package / "tt_engine_demo" / "pylock.runtime.toml"  # the runtime lock its wheel ships
    assert "tt_engine_demo/pylock.runtime.toml" in made["files"] and 'name = "textdistance"' in shipped.read_text()
    assert 'name = "pytest"' not in shipped.read_text()
    assert {"pyproject.toml", "README.md", "tests/test_demo.py", "tt_engine_demo/plugin.py",
            "tt_engine_demo/stages/train.py"} <= set(made["files"])
    # the stage side of the protocol comes from tt-stagekit, never a copy in the package
    assert "tt_engine_demo/protocol.py" not in made["files"]
    assert '"tt-stagekit>=0.1,<0.2"' in (package / "pyproject.toml").read_text()
    stage_source = (package / "tt_engine_demo" / "stages" / "train.py").read_text()
    assert "tt_host" not in stage_source.replace("never imports `tt_host`", "")
    assert "from tt_stagekit.protocol import" in stage_source
    # the stage reads a typed request, as the shipped engines' stages do (train.passes below comes through it)
    assert "class DemoRequest(StageRequest):" in stage_source and "request.spec.demo" in stage_source
    assert "run_main(main, request_type=DemoRequest)" in stage_source
    assert "return StageResult(" in stage_source  # the typed result, never a hand-built dict

    venv = tmp_path / "venv"
    uv = uv_binary()
    sh(uv, "venv", "-q", "--python", getattr(sys, "_base_executable", sys.executable), venv, env=env)
    sh(uv, "pip", "install", "-q", "--python", venv / "bin" / "python", "-e", REPO, "-e", package, "pytest", env=env)
    tt = venv / "bin" / "tt"

    listing = json.loads(sh(tt, "engines", "list", "--json", env=env, cwd=tmp_path).stdout)
    demo = {e["name"]: e for e in listing["engines"]}["demo"]
    assert demo["distribution"] == "tt-engine-demo" and demo["runtime_project"] == str(package)
    assert Path(demo["env_path"]).name.startswith("demo-") and Path(demo["env_path"]).parent == Path(env["TT_ENVS_DIR"])

    spec = {"name": "capitals", "engine": "demo", "system_prompt": "Answer with the capital city.",
            "examples": [{"input": f"Capital of country {i}?", "output": f"City {i}"} for i in range(10)],
            "demo": {"steps": 2}}
    (tmp_path / "tunedtensor.json").write_text(json.dumps(spec))
    proc = subprocess.run([tt, "run", "tunedtensor.json", "--json"], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_dir = Path(json.loads(proc.stdout)["run_dir"])
    report = json.loads((run_dir / "report.json").read_text())
    assert report["status"] == "completed" and report["engine"] == "demo"
    assert report["metrics"]["train.passes"] == 2 and report["metrics"]["demo.count"] >= 1
    written = json.loads((run_dir / "train" / "result.json").read_text())
    assert list(written) == ["status", "metrics", "series", "outputs", "artifacts", "notes", "predictions"]
    assert json.loads((run_dir / "run.json").read_text())["env_key"] == demo["env_key"]
    assert (Path(demo["env_path"]) / ".tt-env-complete.json").is_file()

    # the package's own generated test passes in that environment
    sh(venv / "bin" / "python", "-m", "pytest", "-q", "-p", "no:cacheprovider", package / "tests", env=env, cwd=package)


def tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_existing_folder_and_bad_names_are_refused_creating_nothing(tt, tmp_path):
    work = tmp_path / "work"
    (work / "taken").mkdir(parents=True)
    (work / "taken" / "keep.txt").write_text("mine")
    before = tree(work)
    tt.cwd = work
    for args, needle in [
        (("demo", work / "taken"), "already exists"),
        (("Demo", work / "a"), "NAME 'Demo'"),
        (("my-engine", work / "b"), "NAME 'my-engine'"),
        (("class", work / "c"), "keyword"),
        (("examples", work / "d"), "field of the neutral spec"),
        (("", work / "e"), "NAME ''"),
    ]:
        proc = tt("engines", "new", *args)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert needle in " ".join(proc.stderr.split()), (args, proc.stderr)
    assert tree(work) == before
    assert (work / "taken" / "keep.txt").read_text() == "mine"


def test_without_lock_it_says_how_to_lock(tt, tmp_path):
    proc = tt("engines", "new", "nolock", "--no-lock")
    assert proc.returncode == 0, proc.stderr
    package = tmp_path / "tt-engine-nolock"
    assert (package / "pyproject.toml").is_file() and not (package / "uv.lock").exists()
    flat = proc.stderr.replace("\n", "")
    assert "uv lock" in flat and str(package) in flat, proc.stderr
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "staging folder left behind"


def test_offline_lock_failure_still_scaffolds_and_says_how_to_lock(tt, tmp_path):
    tt.env.update(TT_OFFLINE="1", UV_CACHE_DIR=str(tmp_path / "empty-uv-cache"))
    code, made = tt.json("engines", "new", "offline_demo", tmp_path / "pkg")
    assert code == 0 and made["locked"] is False and "uv lock" in made["lock_error"]
    assert made["lock_command"] == f"cd {tmp_path / 'pkg'} && uv lock && tt engines install -e . && tt engines lock offline_demo"
    assert not (tmp_path / "pkg" / "tt_engine_offline_demo" / "pylock.runtime.toml").exists()
    assert (tmp_path / "pkg" / "pyproject.toml").is_file() and not (tmp_path / "pkg" / "uv.lock").exists()
