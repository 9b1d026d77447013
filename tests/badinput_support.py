"""In-process `tt` for the bad-input suites: typer's CliRunner with the echo engine installed, a private TT_HOME.

Fast enough for property-based tests (no interpreter start per call); a few
cases still go through the real console script (`tt` fixture) where a hang or
a pipe is the point.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from typer.testing import CliRunner


@dataclass
class Outcome:
    code: int
    stdout: str
    stderr: str
    exception: Optional[BaseException]

    def json(self) -> Any:
        return json.loads(self.stdout)


class InProcessTT:
    """`tt ARGS` inside this interpreter; refuses (AssertionError) any uncaught exception: a traceback."""

    def __init__(self):
        from tt_host.cli.main import app

        self.app, self.runner = app, CliRunner()

    def __call__(self, *args: Any) -> Outcome:
        result = self.runner.invoke(self.app, [str(a) for a in args])
        exc = result.exception
        assert exc is None or isinstance(exc, SystemExit), (
            f"tt {' '.join(map(str, args))} raised {exc!r}\n{result.stdout}\n{result.stderr}")
        return Outcome(result.exit_code, result.stdout, result.stderr, exc)

    def json(self, *args: Any) -> tuple[int, Any]:
        out = self(*args, "--json")
        try:
            return out.code, out.json()
        except json.JSONDecodeError:
            raise AssertionError(f"--json printed no JSON (exit {out.code}):\n{out.stdout}\n{out.stderr}") from None


def snapshot(root: Path) -> set[str]:
    """Every path under root (folders too), to prove a refused command created nothing."""
    found = set()
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            found.add(os.path.relpath(os.path.join(folder, name), root))
    return found


def error_locs(out: Any) -> list[str]:
    return [e["loc"] for e in out.get("errors", [])]


def assert_refused(tt: "InProcessTT", spec: Path, field: str, root: Path, before: set[str]) -> Any:
    """`tt validate --json` and `tt run` both exit 2 naming `field` alone, and nothing under root changed.
    Returns validate's JSON."""
    code, out = tt.json("validate", spec)
    assert code == 2 and error_locs(out) == [field], out
    ran = tt("run", spec, "--device", "cpu")
    assert ran.code == 2 and field in ran.stdout + ran.stderr
    assert snapshot(root) == before
    return out


def general_set_refusal(tt: "InProcessTT", folder: Path, data: bytes) -> str:
    """`tt validate` of an echo spec whose general-regression set is `data`: exit 2 naming that field, nothing
    created under `folder`; returns the error's message."""
    from conftest import echo_spec, write_spec

    (folder / "s").mkdir(parents=True, exist_ok=True)
    (folder / "s" / "general.jsonl").write_bytes(data)
    spec = echo_spec()
    spec["evaluation"] = {"general_regression": {"dataset": "general.jsonl"}}
    path = write_spec(folder / "s", spec)
    before = snapshot(folder)
    code, out = tt.json("validate", path)
    assert code == 2 and "evaluation.general_regression" in error_locs(out)[0], out
    assert snapshot(folder) == before
    return out["errors"][0]["msg"]


def in_process_tt(base: Path):
    """Context manager: the echo engine on sys.path, TT_HOME under `base`, plugin discovery re-run."""
    import contextlib
    import sys

    import pytest

    from conftest import shared_envs_dir
    from plugin_site import echo_site

    @contextlib.contextmanager
    def setup():
        from tt_host.plugins import plugins

        with pytest.MonkeyPatch.context() as mp:
            for entry in reversed(echo_site(base / "site")):
                mp.syspath_prepend(entry)
            mp.setenv("TT_HOME", str(base / "tt-home"))
            mp.setenv("TT_ENVS_DIR", shared_envs_dir())
            for name in ("TT_PLUGINS", "TT_DISABLE_PLUGINS", "TT_PLUGINS_STRICT"):
                mp.delenv(name, raising=False)
            plugins.cache_clear()
            try:
                yield InProcessTT()
            finally:
                plugins.cache_clear()
                sys.modules.pop("tt_engine_echo.plugin", None)

    return setup()
