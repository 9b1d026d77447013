"""Where uv and the base interpreter are: the two programs every engine environment is built with."""

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


def base_python() -> str:
    """The interpreter tt's own environment was made from: engine environments are built on it."""
    return getattr(sys, "_base_executable", sys.executable)
