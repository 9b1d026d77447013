"""`tt doctor`: host checks (python, uv, disk, writable folders, plugins) and a spec's checks: its fields
(placeholders included), its engine's checks, and the disk its run needs (tt_host.checks.preflight)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Iterator, Optional

from tt_host.engine import Check
from tt_host.plugins import Plugins
from tt_host.checks.preflight import existing_parent

MIN_FREE_GB = 10.0


def _writable(path: Path) -> tuple[bool, str]:
    probe = existing_parent(path)
    return os.access(probe, os.W_OK), str(probe)


def _disk(path: Path) -> float:
    return shutil.disk_usage(existing_parent(path)).free / 1e9


def host_checks(plugins: Plugins) -> Iterator[Check]:
    from tt_host.engines import envs
    from tt_host.engines.uv import uv_binary

    version = ".".join(map(str, sys.version_info[:3]))
    yield Check("python", "ok" if sys.version_info >= (3, 11) else "fail", f"{version} at {sys.executable}",
                "" if sys.version_info >= (3, 11) else "install Python 3.11 or newer")
    try:
        uv = uv_binary()
        out = subprocess.run([uv, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
        yield Check("uv", "ok", f"{out} ({uv})")
    except (envs.EnvBuildError, OSError, subprocess.SubprocessError) as exc:
        yield Check("uv", "fail", str(exc), "pip install uv (it is a dependency of tt)")
    root = envs.envs_root()
    ok, where = _writable(root)
    free = _disk(root)
    yield Check("environments folder", "ok" if ok else "fail", f"{root} (writable: {ok}, {free:.1f} GB free)",
                "" if ok else f"make {where} writable or set TT_ENVS_DIR")
    if free < MIN_FREE_GB:
        yield Check("disk for environments", "warn", f"{free:.1f} GB free under {root}",
                    f"engine environments with torch need ~{MIN_FREE_GB:.0f} GB; free space or set TT_ENVS_DIR")
    yield Check("engines", "ok" if plugins.engines else "warn", ", ".join(sorted(plugins.engines)) or "none installed",
                "" if plugins.engines else "install an engine plugin (tt engines install NAME; tt engines list shows what is installed)")
    for problem in plugins.problems:
        yield Check(f"plugin {problem.plugin}", "warn", problem.error, "reinstall or disable it (TT_DISABLE_PLUGINS)")


def spec_checks(spec_path: Path, device: Optional[str], plugins: Plugins,
                run_folder: Optional[Path] = None) -> Iterator[Check]:
    from tt_host.engines import envs
    from tt_host.engines.uv import uv_binary
    from tt_host.checks.preflight import default_run_folder, engine_disk_checks
    from tt_host.spec.loading import load_spec

    loaded = load_spec(spec_path, plugins)
    for error in loaded.errors:
        yield Check(f"spec {error.loc}", "fail", error.msg, f"fix {spec_path} and run `tt validate`")
    for warning in loaded.warnings:
        yield Check(f"spec {warning.loc}", "warn", warning.msg, f"rename it in {spec_path}")
    run_root = default_run_folder(spec_path, run_folder)
    ok, where = _writable(run_root)
    yield Check("run folder", "ok" if ok else "fail", f"{run_root} (writable: {ok})",
                "" if ok else f"make {where} writable or use --resume DIR elsewhere",
                {"folder": str(run_root), "measured_at": where, "writable": ok})
    if loaded.engine is None:
        return
    try:
        path = envs.env_dir(loaded.engine)
        ready = envs.is_ready(path)
        yield Check(f"{loaded.engine.name} environment", "ok" if ready else "warn", str(path),
                    "" if ready else f"built on first run, or now with `tt engines prepare {loaded.engine.name}`")
    except envs.EnvBuildError as exc:
        yield Check(f"{loaded.engine.name} environment", "fail", str(exc), "reinstall the engine plugin")
    if loaded.engine.doctor is not None and loaded.spec is not None:
        try:
            yield from loaded.engine.doctor(loaded.spec, device or "auto")
        except Exception as exc:  # an engine's doctor must not crash tt doctor
            yield Check(f"{loaded.engine.name} checks", "fail", f"the engine's doctor raised {exc!r}",
                        "report this to the engine's authors")
    yield from engine_disk_checks(loaded.engine, loaded.spec, run_root)


def run_checks(spec_path: Optional[Path], device: Optional[str], plugins: Plugins,
               run_folder: Optional[Path] = None) -> list[Check]:
    checks = list(host_checks(plugins))
    if spec_path is not None:
        checks += list(spec_checks(Path(spec_path), device, plugins, run_folder))
    return checks
