"""docs/plugins.md cannot rot: its titled code blocks are written out, locked, installed and run with `tt run`;
its reference is checked against the host (hooks, record fields, request fields, switches)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from conftest import REPO, write_spec  # noqa: F401
from plugin_site import add_distribution
from plugin_tutorial_support import GUIDE, blocks, write_tutorial

from tt_host import hookspecs
from tt_host.engine import Check, Engine, Stage
from tt_host.engines.uv import uv_binary

PROTOCOL = REPO / "docs" / "protocol.md"


def table_keys(text: str, heading: str) -> list[str]:
    """First-column `names` of the markdown table that follows a heading."""
    section = text[text.index(heading):]
    keys = []
    for line in section.splitlines()[1:]:
        if line.startswith("#"):
            break
        cell = line.split("|")[1] if line.startswith("|") else ""
        keys += re.findall(r"`([a-z_0-9]+)`", cell)
    return keys


def test_tutorial_engine_builds_installs_and_runs(tt, tmp_path):
    files = write_tutorial(tmp_path / "tutorial")
    project = files["tt-engine-parrot/pyproject.toml"].parent
    spec = files["tunedtensor.json"]
    lock = subprocess.run([uv_binary(), "lock", "--project", str(project), "--python",
                           getattr(sys, "_base_executable", sys.executable)],
                          capture_output=True, text=True, timeout=300)
    assert lock.returncode == 0, lock.stderr
    # install as the tutorial's pyproject declares it: its entry points, through a real dist-info
    meta = tomllib.loads(files["tt-engine-parrot/pyproject.toml"].read_text())
    entry_points = meta["project"]["entry-points"]["tt"]
    site = add_distribution(tmp_path / "site", meta["project"]["name"], meta["project"]["version"], entry_points)
    tt.env["PYTHONPATH"] = os.pathsep.join([str(site), str(project)])
    tt.env["TT_PLUGINS"] = ",".join(entry_points)
    tt.env["TT_PLUGINS_STRICT"] = "1"
    tt.cwd = spec.parent

    code, listing = tt.json("engines", "list")
    assert code == 0 and [e["name"] for e in listing["engines"]] == ["parrot"], listing
    code, prepared = tt.json("engines", "prepare", "parrot")
    assert code == 0 and Path(prepared["path"]).name.startswith("parrot-"), prepared
    code, doctor = tt.json("doctor", spec)
    assert any(c["name"] == "parrot device" and c["status"] == "ok" for c in doctor["checks"]), doctor

    code, run = tt.json("run", spec)
    assert code == 0 and run["status"] == "completed", run
    run_dir = Path(run["run_dir"])
    report = json.loads((run_dir / "report.json").read_text())
    assert report["engine"] == "parrot" and report["status"] == "completed"
    metrics = report["metrics"]
    assert metrics["memorize.examples"] >= 6 and metrics["parrot.count"] >= 1
    assert 0.0 <= metrics["parrot.exact_match"] <= 1.0 and "parrot.token_f1" in metrics
    for name in ("memorize", "answer"):
        assert (run_dir / name / "result.json").is_file() and (run_dir / "logs" / f"{name}.log").is_file()
    code, models = tt.json("models", "list")
    assert any(m.get("engine") == "parrot" for m in (models if isinstance(models, list) else models.get("models", [])))

    # the reference documents exactly the request fields the host writes
    request = json.loads((run_dir / "answer" / "request.json").read_text())
    guide = GUIDE.read_text()
    documented = table_keys(guide, "#### Request fields")
    assert sorted(documented) == sorted(request), (sorted(documented), sorted(request))
    assert set(request) <= set(table_keys(PROTOCOL.read_text(), "## Request")), "protocol.md is missing a field"
    result = json.loads((run_dir / "memorize" / "result.json").read_text())
    assert set(result) <= set(table_keys(guide, "#### Result fields"))

    # the tutorial's own per-engine tests pass
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(project / "tests")],
                          env=tt.env, cwd=project, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_reference_covers_every_hook_field_and_switch():
    guide = GUIDE.read_text()
    hooks = [name for name in dir(hookspecs) if name.startswith("tt_") and callable(getattr(hookspecs, name))]
    assert hooks
    for hook in hooks:
        assert f"#### `{hook}(" in guide, f"hook {hook} is not in the reference"
    for record, heading in ((Engine, "### `Engine` fields"), (Stage, "### `Stage` fields"), (Check, "### `Check` fields")):
        fields = {f.name for f in dataclasses.fields(record)} - {"distribution", "distribution_version"}
        assert fields == set(table_keys(guide, heading)), record.__name__
    import tt_host.plugins as plugins_module

    for switch in set(re.findall(r"`(TT_[A-Z_]+)", plugins_module.__doc__)):
        assert f"`{switch}`" in table_keys(guide, "## Switches") or f"| `{switch}` |" in guide, switch
    for kind in ("progress", "metrics", "log", "artifact", "stage_start", "stage_end"):
        assert f'{{"type": "{kind}"' in guide, f"no example of the {kind} event"


def test_examples_in_the_guide_are_valid():
    seen = 0
    for lang, title, body in blocks():
        if lang == "python":
            compile(body, title or "docs/plugins.md", "exec")
            seen += 1
        elif lang == "json":
            json.loads(body)
        elif lang == "toml":
            tomllib.loads(body)
    assert seen >= 8
    for line in GUIDE.read_text().splitlines():  # every example cell that looks like JSON parses
        for cell in line.split("|")[3:4] if line.startswith("| `") else []:
            for example in re.findall(r"`(\{.*\})`", cell):
                if "…" not in example and "..." not in example:
                    json.loads(example)
