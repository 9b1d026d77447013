"""No code from the working or run folder runs: a `json.py` planted in a run folder is never
imported by the stages of `tt run --resume`, one in the folder `tt doctor` starts from never by the torch
probe, a `sysconfig.py` never steers where wheel-mode engine files are copied, and a `uv.toml` in the
current folder is never read by `tt engines install` or `tt engines prepare`.

Each planted file leaves a marker when it runs (or, for uv, a cache folder it names), so each test fails
when the safe path (`python -P`, PYTHONSAFEPATH) or `uv --no-config` is taken away.
"""

from __future__ import annotations

import json
import sysconfig
from pathlib import Path

from conftest import REPO, echo_spec, write_spec
from example_copy_support import tracked_copy

PLANTED = """import pathlib
pathlib.Path({marker!r}).write_text("planted {name} ran")
raise SystemExit("planted {name} ran")
"""


def plant(folder: Path, module: str, marker: Path) -> None:
    (folder / f"{module}.py").write_text(PLANTED.format(marker=str(marker), name=module))


def plant_uv_config(folder: Path) -> Path:
    """A uv.toml naming a cache folder and an index of its own: uv creates the cache folder when it reads it."""
    cache = folder / "planted-uv-cache"
    (folder / "uv.toml").write_text(f'cache-dir = "{cache}"\n[[index]]\nurl = "file://{folder}/planted-index"\n'
                                    "default = true\n")
    return cache


def test_resume_never_imports_a_json_py_planted_in_the_run_folder(tt, tmp_path):
    spec, run = write_spec(tmp_path / "s", echo_spec(steps=3, fail_at_step=2)), tmp_path / "run"
    code, out = tt.json("run", spec, "--resume", run)
    assert code == 1 and out["status"] == "failed", out
    marker = tmp_path / "marker"
    plant(run, "json", marker)
    plant(run / "train", "json", marker)
    spec = write_spec(tmp_path / "s", echo_spec(steps=3))
    code, out = tt.json("run", spec, "--resume", run)
    assert not marker.exists(), marker.read_text()
    assert code == 0 and out["status"] == "completed", out
    assert out["report"]["stages"]["train"]["this_run"] == "resumed", out


def test_doctor_probe_never_imports_a_json_py_beside_the_spec_or_in_the_current_folder(tt, tmp_path):
    folder = tmp_path / "project"
    tracked_copy("examples/foundation", folder)
    marker = tmp_path / "marker"
    plant(folder, "json", marker)
    tt.cwd = folder
    proc = tt("doctor", folder / "tunedtensor.json", "--device", "cpu", "--json")
    assert not marker.exists(), marker.read_text()
    checks = {check["name"]: check for check in json.loads(proc.stdout)["checks"]}
    # the probe ran (the foundation environment is prepared by scripts/test) and torch answered
    assert checks["foundation.device"]["status"] == "ok", checks["foundation.device"]


def test_wheel_mode_site_packages_ignores_a_planted_sysconfig(tmp_path, monkeypatch):
    from tt_host.engines.runtime_lock import site_packages

    marker = tmp_path / "marker"
    plant(tmp_path, "sysconfig", marker)
    monkeypatch.chdir(tmp_path)
    python = Path(sysconfig.get_paths()["scripts"]) / "python"
    assert site_packages(python) == Path(sysconfig.get_paths()["purelib"])
    assert not marker.exists()


def test_engines_install_and_prepare_never_read_a_uv_toml_in_the_current_folder(tt, tmp_path):
    cache = plant_uv_config(tmp_path)
    code, out = tt.json("engines", "install", "foundation")  # already installed here: uv checks and stops
    assert not cache.exists(), "tt engines install read the uv.toml of the current folder"
    assert code == 0, out
    tt.env["TT_ENVS_DIR"] = str(tmp_path / "envs")
    code, out = tt.json("engines", "prepare", "echo")
    assert not cache.exists(), "tt engines prepare read the uv.toml of the current folder"
    assert code == 0, out
