"""Where uv and the base interpreter are: the two programs every engine environment is built with; every uv
call is `uv_command(...)`, which never reads a uv configuration file."""

from __future__ import annotations

import shutil
import sys

from tt_host.errors import EnvBuildError


def uv_binary() -> str:
    """The uv that came with tt (the `uv` distribution), else the one on PATH."""
    try:
        from uv import find_uv_bin

        return find_uv_bin()
    except (ImportError, FileNotFoundError):
        found = shutil.which("uv")
        if found:
            return found
    raise EnvBuildError("uv is not installed; reinstall tt (`pip install tuned-tensor`) or install uv, then `tt doctor`")


# uv otherwise reads uv.toml / [tool.uv] from the current folder and its parents (an index planted in a
# cloned project) and the user's uv.toml: tt's builds and installs depend on the lock and arguments only.
NO_CONFIG = "--no-config"


def uv_command(*arguments: str) -> list[str]:
    """`uv --no-config ARGUMENTS`: every uv call tt makes (the project, where one is meant, is passed as
    --project; its [tool.uv.sources] still apply, its settings and any uv.toml do not)."""
    return [uv_binary(), NO_CONFIG, *arguments]


def base_python() -> str:
    """The interpreter tt's own environment was made from: engine environments are built on it."""
    return getattr(sys, "_base_executable", sys.executable)
