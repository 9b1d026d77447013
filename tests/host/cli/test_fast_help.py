"""`tt` and `tt --help` drawn without typer (tt_host.cli.fasthelp) print exactly what the typer app prints.

The drift guard: typer renders the real app (tt_host.cli.main) at every width the fast
path answers for, plain and in colour, and the fast rendering must be the same text,
escape sequences included. A new command, a changed docstring or sub-app help, a
typer or rich upgrade that draws differently: this fails until tt_host/cli/toplevel.py
(or fasthelp.py) says the same again.
"""

from __future__ import annotations

import io
import subprocess
import sys

import pytest
import typer.rich_utils
from typer.testing import CliRunner

from conftest import TT_BIN
from tt_host.cli import fasthelp
from tt_host.cli.main import app

WIDTHS = [*range(fasthelp.MIN_WIDTH, 161), 200, 250, 400]
# what typer prints when asked through the typer app, whatever fasthelp would do
TYPER_APP = "import sys; from tt_host.cli.main import main; sys.argv[0] = 'tt'; main()"


@pytest.fixture
def typer_help(monkeypatch):
    """typer's rendering of the real app at a width, plain or in colour: (output, exit code)."""
    monkeypatch.setattr(typer.rich_utils, "FORCE_TERMINAL", None)  # read from the environment at import
    monkeypatch.setattr(typer.rich_utils, "MAX_WIDTH", None)
    runner = CliRunner()

    def render(args: list[str], width: int, colour: bool) -> tuple[str, int]:
        env = {name: None for name in fasthelp._ENVIRONMENT}
        env.update(COLUMNS=str(width), LINES="40", FORCE_COLOR="1" if colour else None)
        result = runner.invoke(app, args, prog_name="tt", env=env, color=colour)
        return result.output, result.exit_code

    return render


@pytest.mark.parametrize("colour", [False, True], ids=["plain", "colour"])
def test_fast_help_is_typers_at_every_width(typer_help, colour):
    for width in WIDTHS:
        fast = fasthelp.render(width, colour)
        assert fast is not None, f"the fast help gives up at width {width}: fasthelp cannot draw toplevel.py any more"
        output, code = typer_help(["--help"], width, colour)
        assert code == 0
        assert fast + "\n" == output, f"`tt --help` at width {width} differs; update tt_host/cli/toplevel.py"
    for width in (fasthelp.MIN_WIDTH, 80, 123):
        assert typer_help([], width, colour) == (fasthelp.render(width, colour), 2), f"bare `tt` at width {width}"


def test_fast_help_gives_way_below_its_width():
    assert fasthelp.render(fasthelp.MIN_WIDTH - 1, False) is None


class _Stdout(io.StringIO):
    def __init__(self, terminal: bool, encoding: str = "utf-8"):
        super().__init__()
        self.terminal, self._encoding = terminal, encoding

    @property
    def encoding(self):
        return self._encoding

    def isatty(self):
        return self.terminal


@pytest.mark.parametrize("environ,stdout", [
    ({"NO_COLOR": "1"}, _Stdout(True)),
    ({"FORCE_COLOR": "1"}, _Stdout(False)),
    ({"TERMINAL_WIDTH": "100"}, _Stdout(False)),
    ({"TERM": "dumb"}, _Stdout(True)),
    ({"COLUMNS": "40"}, _Stdout(False)),
    ({}, _Stdout(False, encoding="latin-1")),
], ids=["NO_COLOR", "FORCE_COLOR", "TERMINAL_WIDTH", "dumb-terminal", "narrow", "not-utf8"])
def test_fast_help_leaves_the_unusual_to_typer(monkeypatch, environ, stdout):
    monkeypatch.setattr(sys, "argv", ["/somewhere/bin/tt", "--help"])
    assert fasthelp.for_stdout({"COLUMNS": "80", **environ}, stdout) is None
    assert fasthelp.for_stdout({"COLUMNS": "80"}, _Stdout(stdout.terminal)) is not None


@pytest.mark.parametrize("args", [["--help"], [], ["--version"]], ids=["help", "bare", "version"])
@pytest.mark.parametrize("columns", ["100", "40"], ids=["fast", "typer"])
def test_tt_prints_what_the_typer_app_prints(tt, args, columns):
    """The console script (echo plugin installed: plugins add nothing to the top-level help) against the
    typer app in the same environment: stdout, stderr and exit code."""
    env = {**tt.env, "COLUMNS": columns}
    fast = subprocess.run([TT_BIN, *args], env=env, capture_output=True, text=True, timeout=60)
    slow = subprocess.run([sys.executable, "-c", TYPER_APP, *args], env=env, capture_output=True, text=True,
                          timeout=60)
    assert (fast.stdout, fast.stderr, fast.returncode) == (slow.stdout, slow.stderr, slow.returncode)
    assert fast.returncode == {"--help": 0, "--version": 0}.get(args[0] if args else "", 2)


def test_fast_help_imports_nothing_heavy(tt):
    probe = ("import sys; sys.argv = ['tt', '--help']; from tt_host.cli.entry import main; code = main(); "
             "heavy = [m for m in ('typer', 'click', 'rich', 'pydantic', 'pluggy', 'importlib.metadata', "
             "'tt_host.plugins', 'tt_host.cli.main') if m in sys.modules]; "
             "sys.stderr.write(f'{code} {heavy}')")
    proc = subprocess.run([sys.executable, "-c", probe], env={**tt.env, "COLUMNS": "80"}, capture_output=True,
                          text=True, timeout=60)
    assert proc.stderr == "0 []" and "Commands" in proc.stdout
