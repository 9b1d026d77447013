"""`tt engines install|uninstall`: add or remove plugin distributions in the environment tt itself runs in.

Plugins must sit next to tt (the host finds them through entry points), so the
installer targets `sys.executable`'s environment, whatever made it:

- a `uv tool install tuned-tensor` environment (`uv-receipt.toml` in sys.prefix)
  or any other virtual environment: `uv pip install --python <tt's python>`
  (uv is a dependency of tt, so it is always there; pip may not be);
- a `pipx install tuned-tensor` environment (`pipx_metadata.json`), when the
  `pipx` command is on PATH: `pipx inject` / `pipx uninject`, so pipx keeps the
  plugin across `pipx upgrade` and `pipx reinstall`.

An argument is a PATH (a project folder or a .whl file), an engine NAME
(`NAME` means the distribution `tt-engine-NAME`), or any other
requirement (`tt-observer-csv`, `tt-engine-x>=1.2`). Bad arguments are refused
before anything runs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Callable, Sequence

from tt_host.errors import TTError

ENGINE_NAME = re.compile(r"^[a-z][a-z0-9_]*\Z")
HOST_DISTRIBUTION = "tuned-tensor"


class InstallError(TTError, ValueError):
    """A bad argument; nothing was run (exit 2)."""

    exit_code = 2


@dataclass(frozen=True)
class Installer:
    kind: str  # "uv tool", "pipx" or "venv"
    prefix: Path

    def install(self, requirements: Sequence[str], upgrade: bool) -> list[str]:
        if self.kind == "pipx":
            return [self._pipx(), "inject", self.prefix.name, *(["--force"] if upgrade else []), *requirements]
        return _uv("pip", "install", "--python", sys.executable, *(["--upgrade"] if upgrade else []), *requirements)

    def uninstall(self, distribution: str) -> list[str]:
        if self.kind == "pipx":
            return [self._pipx(), "uninject", self.prefix.name, distribution]
        return _uv("pip", "uninstall", "--python", sys.executable, distribution)

    def _pipx(self) -> str:
        return shutil.which("pipx") or "pipx"


def _uv(*arguments: str) -> list[str]:
    from tt_host.engines.uv import uv_command

    return uv_command(*arguments)


def detect() -> Installer:
    prefix = Path(sys.prefix)
    if (prefix / "pipx_metadata.json").is_file() and shutil.which("pipx"):
        return Installer("pipx", prefix)
    if (prefix / "uv-receipt.toml").is_file():
        return Installer("uv tool", prefix)
    return Installer("venv", prefix)


def requirement(argument: str, editable: bool = False) -> list[str]:
    """The installer arguments for one NAME|PATH|WHEEL argument."""
    path = Path(argument).expanduser()
    if argument.endswith(".whl") or "/" in argument or argument.startswith(".") or path.exists():
        if not path.exists():
            raise InstallError(f"PATH {argument}: no such file or folder")
        path = path.resolve()
        if path.is_file() and path.suffix != ".whl":
            raise InstallError(f"PATH {argument}: a file must be a wheel (.whl); pass a project folder or a wheel")
        if path.is_dir() and not any((path / marker).is_file() for marker in ("pyproject.toml", "setup.py")):
            raise InstallError(f"PATH {argument}: not a Python project (no pyproject.toml); "
                               "pass the plugin's project folder, e.g. the one `tt engines new` made")
        if editable and not path.is_dir():
            raise InstallError(f"--editable needs a project folder, not {argument}")
        return ["--editable", str(path)] if editable else [str(path)]
    if editable:
        raise InstallError(f"--editable needs a project folder; {argument!r} is not a path")
    if ENGINE_NAME.match(argument):
        return [f"tt-engine-{argument.replace('_', '-')}"]
    if not re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]*", argument):
        raise InstallError(f"{argument!r} is neither an engine NAME, a PATH nor a requirement")
    return [argument]


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def protected() -> set[str]:
    """tt itself and what it needs to run: never uninstalled by `tt engines uninstall`."""
    names = {HOST_DISTRIBUTION}
    try:
        for line in metadata.distribution(HOST_DISTRIBUTION).requires or []:
            match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", line)
            if match and "extra" not in line:
                names.add(_normalize(match.group(1)))
    except metadata.PackageNotFoundError:
        pass
    return names


def check_uninstallable(distribution: str) -> None:
    try:
        metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        raise InstallError(f"NAME {distribution!r} is neither an installed engine nor a distribution installed "
                           "next to tt; see `tt engines list`") from None
    if _normalize(distribution) in protected():
        raise InstallError(f"NAME {distribution!r} is part of tt itself; uninstall tt instead "
                           "(`uv tool uninstall tuned-tensor` or `pipx uninstall tuned-tensor`)")


def run(command: list[str], log: Callable[[str], None]) -> int:
    env = dict(os.environ)
    env.pop("VIRTUAL_ENV", None)  # uv must install into tt's environment, not an activated one
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert process.stdout is not None
    for line in process.stdout:
        log(line.rstrip())
    return process.wait()
