"""Host API versioning and the plugin switches: an engine written for another host API major is listed, not used."""

from __future__ import annotations

import os

from conftest import echo_spec, write_spec
from plugin_site import ECHO_SOURCE, add_distribution

from tt_host import HOST_API_VERSION

FUTURE = f'''
from pathlib import Path
from typing import Literal
from tt_host.engine import Engine, Stage
from tt_host.hookspecs import hookimpl
from tt_host.spec.schema import BehaviorSpec


class FutureSpec(BehaviorSpec):
    engine: Literal["future"] = "future"


@hookimpl
def tt_engines():
    yield Engine(name="future", spec_model=FutureSpec, host_api="{{api}}",
                 stages=(Stage("prepare", "tt_engine_echo.stages.prepare"),),
                 runtime_project=Path({str(ECHO_SOURCE)!r}))
'''


def with_future(tt, tmp_path, api: str):
    site = add_distribution(tmp_path / "site-future", "tt-engine-future", "3.0.0", {"future": "tt_future_plugin"},
                            {"tt_future_plugin": FUTURE.replace("{api}", api)})
    tt.env["PYTHONPATH"] = os.pathsep.join([str(site), tt.env["PYTHONPATH"]])
    return tt


def test_incompatible_engine_is_listed_with_versions_and_refused_by_run(tt, tmp_path):
    tt = with_future(tt, tmp_path, "2.0")
    code, listing = tt.json("engines", "list")
    assert code == 0
    assert "future" not in [e["name"] for e in listing["engines"]]
    assert "echo" in [e["name"] for e in listing["engines"]]  # the others still work
    problem = next(p for p in listing["problems"] if p["engine"] == "future")
    assert problem["distribution"] == "tt-engine-future" and problem["version"] == "3.0.0"
    assert "needs host API 2.0" in problem["error"] and HOST_API_VERSION in problem["error"]

    human = tt("engines", "list")
    assert "future" in human.stderr and "2.0" in human.stderr

    spec_dir = tmp_path / "spec"
    spec = {k: v for k, v in echo_spec().items() if k != "echo"} | {"engine": "future"}
    path = write_spec(spec_dir, spec)
    proc = tt("run", path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    message = " ".join(proc.stderr.split())
    assert "needs host API 2.0" in message and f"offers {HOST_API_VERSION}" in message
    assert sorted(p.name for p in spec_dir.iterdir()) == ["tunedtensor.json"], "a refused run created files"


def test_older_major_is_refused_too_and_strict_makes_it_fatal(tt, tmp_path):
    tt = with_future(tt, tmp_path, "0.9")
    code, listing = tt.json("engines", "list")
    assert any(p["engine"] == "future" and "needs host API 0.9" in p["error"] for p in listing["problems"])
    tt.env["TT_PLUGINS_STRICT"] = "1"
    proc = tt("engines", "list")
    assert proc.returncode == 1 and "needs host API 0.9" in " ".join(proc.stderr.split())


def test_compatible_engine_is_used(tt, tmp_path):
    tt = with_future(tt, tmp_path, HOST_API_VERSION)
    code, listing = tt.json("engines", "list")
    future = {e["name"]: e for e in listing["engines"]}["future"]
    assert future["host_api"] == HOST_API_VERSION and not listing["problems"]


def test_only_switch_and_hook_tracing(tt, tmp_path):
    tt = with_future(tt, tmp_path, "2.0")
    tt.env["TT_PLUGINS"] = "echo"  # load only echo: the incompatible plugin is not even imported
    tt.env["TT_TRACE_HOOKS"] = "1"
    code, listing = tt.json("engines", "list")
    assert [e["name"] for e in listing["engines"]] == ["echo"] and listing["problems"] == []
    proc = tt("engines", "list", "--json")
    assert "tt_engines" in proc.stderr, proc.stderr
    tt.env.pop("TT_TRACE_HOOKS")
    assert "tt_engines" not in tt("engines", "list", "--json").stderr


def test_api_version_rule():
    from tt_host.plugins import _api_compatible

    assert _api_compatible("1.0")
    assert not _api_compatible("1.7")  # needs a newer minor than this host offers
    assert not _api_compatible("2.0") and not _api_compatible("0.9") and not _api_compatible("one")
