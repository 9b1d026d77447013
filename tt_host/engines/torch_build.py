"""Which build of torch an engine environment holds (cpu, cuda or rocm), the size of its wheel, and what the
GPU libraries beside it take on disk: recorded in the environment's marker when it is built (tt_host.engines.envs)
and shown by `tt engines list` and `tt doctor`.

Read from the environment's own files, never by importing torch: the torch `*.dist-info` folder gives the
version (a local version `+cpu`, `+cu128` or `+rocm6.4` names the build), the `nvidia_*` distributions make a
build without a local version a CUDA one (PyPI's Linux x86-64 torch), and the lock the environment was built
from (uv.lock or a shipped pylock.toml) gives the size of the wheel chosen for this interpreter and platform.
"""

from __future__ import annotations

import os
import platform
import re
import sys
import tomllib
from pathlib import Path
from typing import Any, Optional

GPU_FOLDERS = ("nvidia", "triton", "cuda")  # site-packages folders only a GPU build uses (CUDA libraries, triton)


def site_packages(env: Path) -> Optional[Path]:
    found = sorted(env.glob("lib/python3.*/site-packages"))
    return found[0] if found else None


def _bytes(folder: Path) -> int:
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
    return total


def build_of(version: str, nvidia: bool) -> str:
    """cpu, cuda or rocm from torch's version and whether NVIDIA libraries came with it."""
    local = version.partition("+")[2]
    if local.startswith("cu"):
        return "cuda"
    if local.startswith("rocm"):
        return "rocm"
    if local == "cpu":
        return "cpu"
    return "cuda" if nvidia else "cpu"


def _wheel_tags() -> tuple[str, str, str]:
    return f"cp{sys.version_info[0]}{sys.version_info[1]}", sys.platform, platform.machine()


def wheel_in_lock(lock: Path, version: str) -> Optional[dict[str, Any]]:
    """The torch wheel the lock holds for this version, interpreter and platform: {"file", "bytes"}."""
    try:
        data = tomllib.loads(lock.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    python, system, machine = _wheel_tags()
    for package in data.get("package", []) + data.get("packages", []):  # uv.lock, pylock.toml
        if package.get("name") != "torch" or package.get("version") != version:
            continue
        for wheel in package.get("wheels", []):
            file = str(wheel.get("name") or wheel.get("url", "")).rsplit("/", 1)[-1]
            if f"-{python}-" in file and system in file and machine in file and isinstance(wheel.get("size"), int):
                return {"file": file, "bytes": wheel["size"]}
    return None


def describe_torch(env: Path, lock: Optional[Path] = None) -> Optional[dict[str, Any]]:
    """{"version", "build", "wheel", "wheel_bytes", "gpu_libraries_bytes"} of the torch in `env`; None without
    torch. `lock`: the lock file it was built from (uv.lock of a project, or a pylock.toml)."""
    site = site_packages(env)
    if site is None:
        return None
    infos = sorted(site.glob("torch-*.dist-info"))
    if not infos:
        return None
    version = re.sub(r"^torch-|\.dist-info$", "", infos[0].name)
    nvidia = any(site.glob("nvidia_*.dist-info"))
    wheel = wheel_in_lock(lock, version) if lock is not None and lock.is_file() else None
    return {
        "version": version, "build": build_of(version, nvidia),
        "wheel": wheel["file"] if wheel else None, "wheel_bytes": wheel["bytes"] if wheel else None,
        "gpu_libraries_bytes": sum(_bytes(site / name) for name in GPU_FOLDERS if (site / name).is_dir()),
    }


def size_text(count: Optional[int]) -> str:
    if count is None:
        return "?"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} B"


def summary(record: Optional[dict[str, Any]]) -> str:
    """One line: `torch 2.13.0, cuda build (wheel 526.6 MB; CUDA libraries and triton 3.4 GB)`."""
    if not record:
        return "no torch"
    wheel = f"wheel {size_text(record.get('wheel_bytes'))}" if record.get("wheel_bytes") else "wheel size unknown"
    gpu = record.get("gpu_libraries_bytes") or 0
    extra = f"; CUDA libraries and triton {size_text(gpu)}" if gpu else ""
    return f"torch {record.get('version')}, {record.get('build')} build ({wheel}{extra})"


def short(record: Optional[dict[str, Any]]) -> str:
    """A table cell: `2.13.0 cuda, wheel 526.6 MB + GPU libs 3.6 GB`."""
    if not record:
        return "no torch"
    gpu = record.get("gpu_libraries_bytes") or 0
    return (f"{record.get('version')} {record.get('build')}, wheel {size_text(record.get('wheel_bytes'))}"
            + (f" + GPU libs {size_text(gpu)}" if gpu else ""))
