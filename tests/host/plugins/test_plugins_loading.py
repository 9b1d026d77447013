"""Plugin discovery: one broken plugin is reported, not fatal; duplicate engine names are refused."""

import os

from conftest import echo_spec, write_spec
from plugin_site import add_distribution

BROKEN = "raise RuntimeError('this plugin is broken on purpose')\n"


def with_broken_plugin(tt, tmp_path):
    site = add_distribution(tmp_path / "site-broken", "tt-broken", "9.9", {"broken": "tt_broken_plugin"},
                            {"tt_broken_plugin": BROKEN})
    tt.env["PYTHONPATH"] = os.pathsep.join([str(site), tt.env["PYTHONPATH"]])
    return tt


def test_broken_plugin_is_listed_and_others_still_work(tt, tmp_path):
    tt = with_broken_plugin(tt, tmp_path)
    code, listing = tt.json("engines", "list")
    assert code == 0
    assert "echo" in [e["name"] for e in listing["engines"]]
    broken = [p for p in listing["problems"] if p["plugin"] == "broken"]
    assert broken and "broken on purpose" in broken[0]["error"] and broken[0]["distribution"] == "tt-broken"
    path = write_spec(tmp_path / "s", echo_spec(steps=1))
    assert tt("validate", path).returncode == 0
    code, run = tt.json("run", path)
    assert code == 0 and run["status"] == "completed", run


def test_strict_mode_makes_load_errors_fatal(tt, tmp_path):
    tt = with_broken_plugin(tt, tmp_path)
    tt.env["TT_PLUGINS_STRICT"] = "1"
    proc = tt("engines", "list")
    assert proc.returncode == 1 and "broken on purpose" in proc.stderr


def test_two_plugins_claiming_one_engine_name(tt, tmp_path):
    site = add_distribution(tmp_path / "site-dup", "tt-echo-clone", "1.0", {"zz-echo-clone": "tt_echo_clone"},
                            {"tt_echo_clone": "from tt_engine_echo.plugin import tt_engines  # noqa: F401\n"})
    tt.env["PYTHONPATH"] = os.pathsep.join([str(site), tt.env["PYTHONPATH"]])
    code, listing = tt.json("engines", "list")
    assert "echo" not in [e["name"] for e in listing["engines"]]
    assert any("claimed by plugins" in p["error"] for p in listing["problems"])
    code, out = tt.json("validate", write_spec(tmp_path / "s", echo_spec()))
    assert code == 2 and "claimed by plugins" in out["errors"][0]["msg"]


def test_disable_switch(tt):
    tt.env["TT_DISABLE_PLUGINS"] = "echo"
    code, listing = tt.json("engines", "list")
    assert "echo" not in [e["name"] for e in listing["engines"]]
