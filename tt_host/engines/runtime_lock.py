"""An engine's runtime shipped as a lock: export it from uv.lock, read it, and install the engine beside it.

An engine wheel carries `pylock.runtime.toml` (PEP 751) as package data: every
third-party package its runtime needs, pinned with wheel URLs and hashes,
exported from the engine project's `uv.lock` with only the runtime groups (no
dev, test or bench groups), without the engine itself and without local path
packages (tt-stagekit comes from tt's own installation, see `companions`).

When no source project is at hand (tt and the engine were installed from
wheels), the environment is `uv venv` + `uv pip sync pylock.runtime.toml`, and
then the engine's own distribution and the companions the lock leaves out are
copied, without dependencies, from the installation tt imports them from: the
code that runs in the environment is exactly the code whose plugin tt loaded.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Iterable

from tt_host.engines.isolation import private_folder, python_command, python_env
from tt_host.engines.uv import NO_CONFIG, uv_binary
from tt_host.errors import TTError

LOCK_NAME = "pylock.runtime.toml"
EXPORT_TIMEOUT_SECONDS = 180
# Files of an installed distribution that describe that installation, not the code: never copied or hashed.
_INSTALL_RECORDS = {"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"}


class RuntimeLockError(TTError, RuntimeError):
    """The shipped runtime lock cannot be exported, read or installed (exit 1)."""


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def export_command(uv: str, project: Path, groups: Iterable[str], output: Path) -> list[str]:
    """The `uv export` that writes the shipped lock: runtime groups only, no engine, no local path packages."""
    command = [uv, NO_CONFIG, "export", "--project", str(project), "--format", "pylock.toml", "--locked", "--no-header",
               "--no-default-groups", "--no-emit-project", "--no-emit-local", "--quiet", "--output-file", str(output)]
    for group in groups:
        command += ["--group", group]
    return command


def _exported(project: Path, groups: Iterable[str], offline: bool) -> str:
    if not (project / "uv.lock").is_file():
        raise RuntimeLockError(f"{project} has no uv.lock; run `uv lock --project {project}` first")
    with tempfile.TemporaryDirectory(prefix="tt-export-") as scratch:
        command = export_command(uv_binary(), project, groups, Path(scratch) / LOCK_NAME)
        if offline:
            command.append("--offline")
        env = dict(os.environ)
        env.pop("VIRTUAL_ENV", None)
        try:
            proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=EXPORT_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            raise RuntimeLockError(f"uv export timed out after {EXPORT_TIMEOUT_SECONDS}s for {project}") from None
        if proc.returncode != 0:
            tail = " / ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
            raise RuntimeLockError(f"exporting the runtime lock of {project} failed (uv exit {proc.returncode}): "
                                   f"{tail}; if uv.lock is stale run `uv lock --project {project}`")
        return (Path(scratch) / LOCK_NAME).read_text(encoding="utf-8")


def export(project: Path, groups: Iterable[str], output: Path, offline: bool = False) -> str:
    """Write the lock for `project` to `output` (atomically); return its text."""
    from tt_host.fsutil import write_bytes_atomic

    text = _exported(project, groups, offline)
    write_bytes_atomic(output, text.encode("utf-8"), mode=0o644)
    return text


def is_current(project: Path, groups: Iterable[str], lock: Path) -> bool:
    """Whether `lock` is byte-identical to a fresh export (nothing is written)."""
    return lock.is_file() and lock.read_text(encoding="utf-8") == _exported(project, groups, offline=False)


def locked_names(lock: Path) -> set[str]:
    """Normalized names of the packages the lock installs."""
    try:
        data = tomllib.loads(lock.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise RuntimeLockError(f"{lock}: not a readable pylock.toml ({exc}); reinstall the engine") from None
    return {normalize(package["name"]) for package in data.get("packages", [])}


def _requirement_names(dist: metadata.Distribution) -> list[str]:
    names = []
    for requirement in dist.requires or []:
        if re.search(r"\bextra\s*==", requirement):
            continue
        match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
        if match:
            names.append(normalize(match.group(1)))
    return names


def _distribution(name: str) -> metadata.Distribution:
    try:
        return metadata.distribution(name)
    except metadata.PackageNotFoundError:
        raise RuntimeLockError(f"distribution {name!r} is not installed next to tt; "
                               f"install it with `tt engines install {name}`") from None


def companions(distribution: str, lock: Path) -> list[metadata.Distribution]:
    """The engine's distribution and each direct requirement its lock leaves out (e.g. tt-stagekit)."""
    engine = _distribution(distribution)
    names = locked_names(lock)
    found = [engine]
    for requirement in _requirement_names(engine):
        if requirement not in names:
            found.append(_distribution(requirement))
    return found


@dataclass(frozen=True)
class _File:
    source: Path
    relative: Path


def _code_files(dist: metadata.Distribution) -> list[_File]:
    """The installed files of a distribution inside its site-packages (no scripts, no bytecode, no records)."""
    files = []
    for entry in dist.files or []:
        relative = Path(str(entry))
        if ".." in relative.parts or "__pycache__" in relative.parts or relative.suffix == ".pyc":
            continue
        if relative.parent.name.endswith(".dist-info") and relative.name in _INSTALL_RECORDS:
            continue
        source = Path(str(dist.locate_file(entry)))
        if source.is_file():
            files.append(_File(source, relative))
    if not files:
        raise RuntimeLockError(f"distribution {dist.metadata['Name']!r} lists no installed files; reinstall it")
    return sorted(files, key=lambda f: f.relative.as_posix())


def content_digest(dists: Iterable[metadata.Distribution]) -> str:
    """sha256 over the names and bytes of the files `install_copies` copies."""
    digest = hashlib.sha256()
    for dist in dists:
        for item in _code_files(dist):
            for part in (item.relative.as_posix().encode(), item.source.read_bytes()):
                digest.update(len(part).to_bytes(8, "big"))
                digest.update(part)
    return digest.hexdigest()


def site_packages(python: Path) -> Path:
    with private_folder() as folder:  # -P and a private folder: a planted sysconfig.py is never imported
        out = subprocess.run(python_command(python, ["-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]),
                             capture_output=True, text=True, check=True, cwd=folder, env=python_env())
    return Path(out.stdout.strip())


def install_copies(dists: Iterable[metadata.Distribution], python: Path) -> list[str]:
    """Copy each distribution's installed files into the environment of `python`; no dependencies."""
    target = site_packages(python)
    copied, tops = [], set()
    for dist in dists:
        for item in _code_files(dist):
            out = target / item.relative
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(item.source, out)
            if len(item.relative.parts) > 1 and not item.relative.parts[0].endswith(".dist-info"):
                tops.add(str(target / item.relative.parts[0]))
        copied.append(f"{dist.metadata['Name']}=={dist.version}")
    # stages start fast even where PYTHONDONTWRITEBYTECODE is set (as `uv sync --compile-bytecode` does)
    with private_folder() as folder:
        subprocess.run(python_command(python, ["-m", "compileall", "-q", *sorted(tops)]), capture_output=True,
                       check=False, cwd=folder, env=python_env())
    return copied
