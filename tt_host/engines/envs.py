"""Hashed engine environments, built with uv from the engine's own lock.

An engine's environment lives at `<root>/<engine>-<key>` where root is
`$TT_ENVS_DIR`, else `$XDG_CACHE_HOME/tt/envs`, else `~/.cache/tt/envs`. It is
built from one of two sources (see `runtime_source`):

- the engine's source project (`runtime_project` holds pyproject.toml and
  uv.lock: a clone, an editable install): `uv sync --locked
  --no-default-groups --group <runtime groups>`, the project installed
  editable. key = sha256("tt-env-v2", engine, "project", pyproject.toml bytes,
  uv.lock bytes, interpreter, platform, synced groups, project folder)[:16].
  The folder is part of the key because the project is installed editable from
  it: two byte-identical projects in different folders must not share one.
- the lock its wheel ships (`runtime_lock`, a PEP 751 pylock.toml) when there
  is no source project: `uv venv` + `uv pip sync` of the lock, then the engine
  and the companions the lock leaves out copied without dependencies
  (tt_host.engines.runtime_lock). key = sha256("tt-env-v2", engine, "lock", lock bytes,
  interpreter, platform, digest of the copied files)[:16].

Only runtime dependencies go in: never the project's `dev` group (pytest and
the like); the test scripts build their own test environments.

A build runs under an exclusive lock and the environment becomes usable only
when the marker file `.tt-env-complete.json` is written (atomically) at the
very end: an interrupted build is never used, and the next build starts it
over. `TT_OFFLINE=1` (or `offline=True`) builds from uv's cache only.
"""

from __future__ import annotations

import ctypes
import fcntl
import hashlib
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Optional

from tt_host.engine import Engine
from tt_host.fsutil import FileLock, LockHeld, NotARegularFile, open_regular, remove_tree, write_json_atomic
from tt_host.ids import inside
from tt_host.engines import runtime_lock
from tt_host.engines.torch_build import describe_torch
from tt_host.engines.uv import base_python, uv_command
from tt_host.errors import EnvBuildError

MARKER = ".tt-env-complete.json"
KEY_VERSION = "tt-env-v2"  # v2: no default `dev` group in users' environments; shipped locks


def envs_root() -> Path:
    if os.environ.get("TT_ENVS_DIR"):
        return Path(os.environ["TT_ENVS_DIR"]).expanduser().absolute()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache).expanduser().absolute() / "tt" / "envs"


def interpreter_tag() -> str:
    return f"{sys.implementation.name}-{'.'.join(map(str, sys.version_info[:3]))}"


def platform_tag() -> str:
    return f"{sys.platform}-{platform.machine()}"


def runtime_source(engine: Engine) -> tuple[str, Path]:
    """("project", folder) when the engine's source project is at hand, else ("lock", its shipped lock)."""
    project = Path(engine.runtime_project) if engine.runtime_project is not None else None
    if project is not None and (project / "pyproject.toml").is_file() and (project / "uv.lock").is_file():
        return "project", project
    lock = Path(engine.runtime_lock) if engine.runtime_lock is not None else None
    if lock is not None and lock.is_file():
        return "lock", lock
    where = f"{project} lacks pyproject.toml or uv.lock" if project is not None else "no runtime project"
    shipped = f"no {lock}" if lock is not None else "no runtime_lock"
    raise EnvBuildError(
        f"engine {engine.name!r} has no runtime to build: {where}, and it ships {shipped}. "
        "In a source checkout run `uv lock` there; an installed engine must ship its runtime lock "
        "(`tt engines lock`, see docs/plugins.md): reinstall it with `tt engines install`"
    )


def _key_parts(engine: Engine) -> list[bytes]:
    kind, source = runtime_source(engine)
    head = [KEY_VERSION.encode(), engine.name.encode(), kind.encode()]
    tail = [interpreter_tag().encode(), platform_tag().encode()]
    if kind == "project":
        return head + [(source / "pyproject.toml").read_bytes(), (source / "uv.lock").read_bytes()] + tail + [
            ",".join(sorted(engine.sync_groups)).encode(), str(source.resolve()).encode()]
    try:
        copied = runtime_lock.companions(engine.distribution, source)
        return head + [source.read_bytes()] + tail + [runtime_lock.content_digest(copied).encode()]
    except runtime_lock.RuntimeLockError as exc:
        raise EnvBuildError(f"engine {engine.name!r}: {exc}") from None


def env_key(engine: Engine) -> str:
    digest = hashlib.sha256()
    for part in _key_parts(engine):
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.hexdigest()[:16]


def env_dir(engine: Engine) -> Path:
    return envs_root() / f"{engine.name}-{env_key(engine)}"


def env_python(path: Path) -> Path:
    return path / "bin" / "python"


def is_ready(path: Path) -> bool:
    return (path / MARKER).is_file() and env_python(path).exists()


def _die_with_parent() -> None:
    """In the uv child: receive SIGKILL when tt dies, so no orphan keeps writing the env."""
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


@dataclass
class EnvInfo:
    engine: str
    key: str
    path: Path
    python: Path
    built: bool  # False when it was ready already
    seconds: float


def ensure_env(
    engine: Engine,
    offline: Optional[bool] = None,
    log: Callable[[str], None] = lambda line: None,
    progress: Callable[[str], None] = lambda line: None,
) -> EnvInfo:
    """Return a ready environment for the engine, building it first when needed. `log` gets tt's lines and
    uv's; `progress` gets uv's output lines only (tt_host.engines.build_progress reads them)."""
    started = time.monotonic()
    key = env_key(engine)
    path = envs_root() / f"{engine.name}-{key}"
    if is_ready(path):
        hold(path)
        return EnvInfo(engine.name, key, path, env_python(path), False, time.monotonic() - started)
    if offline is None:
        offline = os.environ.get("TT_OFFLINE", "") not in ("", "0")
    path.parent.mkdir(parents=True, exist_ok=True)
    if str(path) in _IN_USE:  # it was removed behind our back: our own shared lock must not block the build
        os.close(_IN_USE.pop(str(path)))
    lock = FileLock(path.parent / f"{path.name}.lock", holder=f"pid {os.getpid()} building {path.name}")
    try:
        lock.acquire(blocking=True)
    except NotARegularFile as exc:
        raise EnvBuildError(f"environment {path.name}: {exc}") from None
    with lock:
        if is_ready(path):  # another process finished it while we waited
            lock.release()
            hold(path)
            return EnvInfo(engine.name, key, path, env_python(path), False, time.monotonic() - started)
        if path.exists():
            log(f"removing incomplete environment {path}")
            shutil.rmtree(path)
        kind, source = runtime_source(engine)
        both = _tee(log, progress)
        if kind == "project":
            _uv_sync(engine, source, path, offline, both)
        else:
            _from_lock(engine, source, path, offline, both)
        write_json_atomic(
            path / MARKER,
            {"engine": engine.name, "key": key, "source": kind, "from": str(source),
             "interpreter": interpreter_tag(), "platform": platform_tag(),
             "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
             # the torch build the lock gave this platform (cpu or cuda), its wheel and the GPU libraries' size
             "torch": describe_torch(path, lock_file(kind, source))},
        )
    hold(path)
    return EnvInfo(engine.name, key, path, env_python(path), True, time.monotonic() - started)


def _tee(log: Callable[[str], None], progress: Callable[[str], None]) -> Callable[[str], None]:
    def both(line: str) -> None:
        log(line)
        if not line.startswith("building environment "):  # tt's own line, not uv's
            progress(line)
    return both


def lock_file(kind: str, source: Path) -> Path:
    """The lock an environment is built from: the project's uv.lock, or the shipped pylock.toml itself."""
    return source / "uv.lock" if kind == "project" else source


def torch_record(engine: Engine, path: Path) -> Optional[dict]:
    """The environment's torch build as its marker records it (read from the folder for an older marker)."""
    marker = describe(path)
    if "torch" in marker:
        return marker["torch"]
    try:
        kind, source = runtime_source(engine)
    except EnvBuildError:
        return describe_torch(path)
    return describe_torch(path, lock_file(kind, source))


def _uv_sync(engine: Engine, project: Path, path: Path, offline: bool, log: Callable[[str], None]) -> None:
    command = [
        *uv_command("sync", "--locked", "--project", str(project)),
        "--python", base_python(), "--no-python-downloads",
        "--no-default-groups",  # never the project's `dev` group (pytest, ...) in a user's environment
        "--compile-bytecode",  # stages start fast even where PYTHONDONTWRITEBYTECODE is set
    ]
    for group in engine.sync_groups:
        command += ["--group", group]
    _run_uv(engine, command, offline, log, path, UV_PROJECT_ENVIRONMENT=str(path))


def _from_lock(engine: Engine, lock: Path, path: Path, offline: bool, log: Callable[[str], None]) -> None:
    _run_uv(engine, uv_command("venv", "--quiet", "--python", base_python(), "--no-python-downloads", str(path)),
            offline, log, path)
    # uv (0.13) calls installing from a pylock.toml a preview feature; tt pins the uv it is tested with.
    _run_uv(engine, uv_command("pip", "sync", "--preview-features", "pylock", "--python", str(env_python(path)),
                               "--compile-bytecode", str(lock)), offline, log, path)
    try:
        copied = runtime_lock.install_copies(runtime_lock.companions(engine.distribution, lock), env_python(path))
    except (runtime_lock.RuntimeLockError, OSError, subprocess.CalledProcessError) as exc:
        raise EnvBuildError(f"installing the {engine.name!r} engine into {path} failed: {exc}. "
                            f"Run `tt engines prepare {engine.name}` to retry.") from None
    log(f"installed without dependencies: {', '.join(copied)}")


def _run_uv(engine: Engine, command: list[str], offline: bool, log: Callable[[str], None], path: Path,
            **extra_env: str) -> None:
    if offline:
        command = command + ["--offline"]
    env = dict(os.environ, **extra_env)
    env.pop("VIRTUAL_ENV", None)
    log(f"building environment {path.name}: {' '.join(command[1:])}")
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        preexec_fn=_die_with_parent,
    )
    tail: list[str] = []
    assert process.stdout is not None
    for line in process.stdout:
        line = line.rstrip()
        log(line)
        tail = (tail + [line])[-20:]
    if process.wait() != 0:
        hint = "check the network, or run with TT_OFFLINE=0" if offline else "check the network or the lockfile"
        raise EnvBuildError(
            f"building the {engine.name!r} environment failed (uv exit {process.returncode}); {hint}. "
            f"Run `tt engines prepare {engine.name}` to retry.\n" + "\n".join(tail)
        )


def list_envs() -> list[Path]:
    root = envs_root()
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir())


ENV_NAME = re.compile(r"[a-z][a-z0-9_-]*-[0-9a-f]{16}")
_IN_USE: dict[str, int] = {}  # the shared-lock descriptor this process holds on each environment it uses


def hold(path: Path) -> None:
    """Mark the environment at `path` in use by this process (a shared flock on `<name>.lock`, kept until the
    process exits), so `tt engines gc` in another process never deletes it under a running stage or server."""
    if str(path) in _IN_USE:
        return
    try:
        fd = open_regular(path.parent / f"{path.name}.lock", os.O_RDWR | os.O_CREAT)
    except NotARegularFile as exc:
        raise EnvBuildError(f"environment {path.name}: {exc}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
    except OSError:
        os.close(fd)
        return
    _IN_USE[str(path)] = fd


def held_fds(path: Path) -> tuple[int, ...]:
    """The in-use lock's descriptor for `path` (for stage processes to inherit, so it outlives a killed tt)."""
    fd = _IN_USE.get(str(path))
    return () if fd is None else (fd,)


def tt_made(path: Path) -> bool:
    """Whether tt built this folder: an `<engine>-<key>` name, and the complete-marker naming that key, or the
    build lock tt takes beside every environment it builds (an interrupted build)."""
    if not ENV_NAME.fullmatch(path.name) or path.is_symlink() or not path.is_dir():
        return False
    marker = describe(path)
    if marker:
        return path.name.endswith("-" + str(marker.get("key")))
    return (path.parent / f"{path.name}.lock").is_file()


def folder_bytes(path: Path) -> int:
    total = 0
    for root, dirs, files in os.walk(path):
        for name in files + dirs:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                continue
    return total


@dataclass
class GcResult:
    removed: list[tuple[Path, int]]  # (folder, bytes): removed, or that would be in a dry run
    kept: list[tuple[Path, str]]  # (folder, why it stays)


def gc(engines: Iterable[Engine], dry_run: bool = False) -> GcResult:
    """Remove the environments tt built that no installed engine uses now and no process is using.
    Folders tt did not make, the current ones, and ones in use (or being built) are kept, with the reason."""
    keep = set()
    for engine in engines:
        try:
            keep.add(env_dir(engine).name)
        except EnvBuildError:
            continue
    result = GcResult([], [])
    root = envs_root()
    for path in list_envs():
        if path.name in keep:
            result.kept.append((path, "used by an installed engine"))
            continue
        if not tt_made(path):
            result.kept.append((path, "not made by tt (no environment marker or build lock); left alone"))
            continue
        lock = FileLock(path.parent / f"{path.name}.lock", holder=f"pid {os.getpid()} removing {path.name}")
        try:
            lock.acquire()
        except LockHeld:
            result.kept.append((path, "in use by a running tt (or being built)"))
            continue
        except NotARegularFile as exc:
            result.kept.append((path, str(exc)))
            continue
        try:
            size = folder_bytes(path)
            if not dry_run:
                remove_tree(inside(path, root))
            result.removed.append((path, size))
        finally:
            lock.release()
            if not dry_run:
                (path.parent / f"{path.name}.lock").unlink(missing_ok=True)
    return result


def describe(path: Path) -> dict:
    marker = path / MARKER
    return json.loads(marker.read_text()) if marker.is_file() else {}
