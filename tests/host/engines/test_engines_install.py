"""`tt engines install|uninstall|lock`: bad arguments are refused before anything runs; a shipped runtime
lock is written from uv.lock and `--check` catches a stale one without writing.

Installing for real (a wheel and a scaffold folder into a fresh `uv tool` environment) is in
tests/e2e/test_install_from_wheels.py.
"""

from __future__ import annotations

import os
import subprocess
import sys

from plugin_site import add_distribution, copy_echo

from tt_host.engines.uv import uv_binary


def installed_here() -> str:
    return subprocess.run([uv_binary(), "pip", "list", "--python", sys.executable, "--format", "freeze"],
                          capture_output=True, text=True, check=True).stdout


def test_bad_install_arguments_exit_2_and_change_nothing(tt, tmp_path):
    (tmp_path / "notes.txt").write_text("not a wheel")
    (tmp_path / "empty").mkdir()
    before = installed_here()
    for argument, words in [("./missing-engine", "no such file"), ("notes.txt", "must be a wheel"),
                            ("empty", "not a Python project"), ("gone.whl", "no such file")]:
        code, out = tt.json("engines", "install", argument)
        assert code == 2 and words in out["error"]["message"] and argument in out["error"]["message"], (argument, out)
    code, out = tt.json("engines", "install", "--editable", "foundation")
    assert code == 2 and "--editable needs a project folder" in out["error"]["message"], out
    code, out = tt.json("engines", "uninstall", "tuned-tensor")
    assert code == 2 and "part of tt itself" in out["error"]["message"], out
    code, out = tt.json("engines", "uninstall", "no-such-engine")
    assert code == 2 and "tt engines list" in out["error"]["message"], out
    assert installed_here() == before


def test_lock_writes_the_shipped_lock_and_check_catches_a_stale_one(tt, tmp_path):
    project = copy_echo(tmp_path / "echo", ("__pycache__", ".venv", "pylock*.toml"))
    site = add_distribution(tmp_path / "site", "tt-engine-echo", "0.1.0", {"echo": "tt_engine_echo.plugin"})
    tt.env["PYTHONPATH"] = os.pathsep.join([str(site), str(project)])
    lock = project / "tt_engine_echo" / "pylock.runtime.toml"

    code, out = tt.json("engines", "lock", "echo", "--check")
    assert code == 1 and out["locks"] == [{"engine": "echo", "lock": str(lock), "current": False}], out
    assert not lock.exists()
    code, out = tt.json("engines", "lock", "echo")
    assert code == 0 and out["ok"], out
    text = lock.read_text()
    assert 'name = "six"' in text and 'name = "pytest"' not in text and "tt-engine-echo" not in text
    assert tt.json("engines", "lock", "echo", "--check")[0] == 0

    lock.write_text(text.replace('name = "six"', 'name = "six"\n# edited by hand'))
    stale = lock.read_bytes()
    code, out = tt.json("engines", "lock", "echo", "--check")
    assert code == 1 and not out["ok"] and lock.read_bytes() == stale, out
