"""`tt engines new`: generate a working engine plugin package from the templates in `scaffold_templates/`.

The package is rendered into a hidden temporary folder beside the target,
locked with `uv lock` there (and its runtime lock exported into the package,
`<package>/pylock.runtime.toml`, which its wheel ships: tt_host.engines.runtime_lock),
and renamed into place only at the end, so an
existing folder is never touched and a failure leaves nothing half-written.
Templates are plain files ending in `.tmpl`; `{{key}}` placeholders are
replaced, `__package__` / `__name__` in paths become the package / engine name,
and `gitignore` becomes `.gitignore`.
"""

from __future__ import annotations

import json
import keyword
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from tt_host.errors import TTError
from tt_host import HOST_API_VERSION

from tt_host.engines import runtime_lock
from tt_stagekit.files import REFUSE, publish_folder

TEMPLATES = Path(__file__).resolve().parent / "scaffold_templates"
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]{0,38}[a-z0-9]\Z|^[a-z]\Z")
# Keys of the neutral spec: an engine block with one of these names would shadow it.
RESERVED = {"name", "description", "system_prompt", "guidelines", "constraints", "examples", "engine"}
LOCK_TIMEOUT_SECONDS = 180
# The dependency groups of the generated runtime (plugin.py.tmpl names the same ones).
RUNTIME_GROUPS = ("runtime",)


class ScaffoldError(TTError, ValueError):
    """Invalid NAME or DIR; nothing was created (exit 2)."""

    exit_code = 2


@dataclass
class Scaffold:
    name: str
    path: Path
    package: str
    distribution: str
    files: list[str] = field(default_factory=list)
    locked: bool = False
    lock_error: Optional[str] = None
    lock_command: str = ""


def validate_name(name: str) -> None:
    if not NAME_PATTERN.match(name or ""):
        raise ScaffoldError(
            f"NAME {name!r} is not a valid engine name: use 1-40 lowercase letters, digits and underscores, "
            "starting with a letter and not ending with an underscore (e.g. `demo`, `my_trainer`)"
        )
    if keyword.iskeyword(name) or keyword.issoftkeyword(name):
        raise ScaffoldError(f"NAME {name!r} is a Python keyword; it must be usable as a spec field and module name")
    if name in RESERVED:
        raise ScaffoldError(f"NAME {name!r} is a field of the neutral spec; choose another engine name")


def values(name: str) -> dict[str, str]:
    from tt_host import __version__

    return {
        "name": name,
        "package": f"tt_engine_{name}",
        "distribution": f"tt-engine-{name.replace('_', '-')}",
        "class": "".join(part.capitalize() for part in name.split("_") if part),
        "host_api": HOST_API_VERSION,
        "tt_version": __version__,
        "stagekit_source": _stagekit_source(),
    }


def _stagekit_source() -> str:
    """A `[tool.uv.sources]` entry for tt-stagekit when tt runs from a checkout (its project folder is
    at hand), so the new package locks against the same stagekit; else nothing (it comes from the index,
    like tt itself)."""
    import tt_stagekit

    project = Path(tt_stagekit.__file__).resolve().parents[1]
    if not (project / "pyproject.toml").is_file():
        return ""
    return ("[tool.uv.sources]\n# tt-stagekit from the tt checkout that generated this package; remove these two lines\n"
            f"# to take it from the package index.\ntt-stagekit = {{ path = {json.dumps(str(project))}, editable = true }}\n\n")


def render(text: str, mapping: dict[str, str]) -> str:
    for key, value in mapping.items():
        text = text.replace("{{" + key + "}}", value)
    leftover = re.search(r"\{\{[a-z_]+\}\}", text)
    assert leftover is None, f"unfilled placeholder {leftover.group(0)} in a scaffold template"
    return text


def _output_path(relative: Path, mapping: dict[str, str]) -> Path:
    parts = []
    for part in relative.parts:
        part = part.removesuffix(".tmpl").replace("__package__", mapping["package"]).replace("__name__", mapping["name"])
        parts.append(".gitignore" if part == "gitignore" else part)
    return Path(*parts)


def uv_lock(project: Path, log: Callable[[str], None]) -> Optional[str]:
    """Run `uv lock` in the project; return None on success, else the reason it failed."""
    from tt_host.engines.uv import base_python, uv_command
    from tt_host.errors import EnvBuildError

    try:
        command = uv_command("lock", "--project", str(project), "--python", base_python(), "--no-python-downloads")
    except EnvBuildError as exc:
        return str(exc)
    if os.environ.get("TT_OFFLINE", "") not in ("", "0"):
        command.append("--offline")
    env = dict(os.environ)
    env.pop("VIRTUAL_ENV", None)
    try:
        proc = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True,
                              timeout=LOCK_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        return f"uv lock timed out after {LOCK_TIMEOUT_SECONDS}s"
    for line in (proc.stdout + proc.stderr).splitlines():
        log(line)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return f"uv lock exited {proc.returncode}: " + " / ".join(tail)
    return None


def _export_runtime_lock(project: Path, package: str) -> Optional[str]:
    """Write the shipped runtime lock of the new package; None on success, else the reason it failed."""
    try:
        runtime_lock.export(project, RUNTIME_GROUPS, project / package / runtime_lock.LOCK_NAME,
                            offline=os.environ.get("TT_OFFLINE", "") not in ("", "0"))
    except runtime_lock.RuntimeLockError as exc:
        return str(exc)
    return None


def create(name: str, directory: Optional[Path] = None, lock: bool = True,
           log: Callable[[str], None] = lambda line: None) -> Scaffold:
    """Generate the plugin package for engine NAME in DIR (default ./tt-engine-NAME)."""
    validate_name(name)
    mapping = values(name)
    target = Path(directory if directory is not None else mapping["distribution"]).expanduser().absolute()
    if target.exists() or target.is_symlink():
        raise ScaffoldError(f"DIR {target} already exists; `tt engines new` never overwrites a folder, "
                            "pass a new DIR")
    if target.parent.exists() and not target.parent.is_dir():
        raise ScaffoldError(f"DIR {target}: {target.parent} is not a folder")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.parent / f".{target.name}.tt-new-{os.getpid()}"
    result = Scaffold(name, target, mapping["package"], mapping["distribution"],
                      lock_command=f"cd {target} && uv lock && tt engines install -e . && tt engines lock {name}")
    try:
        staging.mkdir()
        for template in sorted(p for p in TEMPLATES.rglob("*.tmpl") if p.is_file()):
            relative = _output_path(template.relative_to(TEMPLATES), mapping)
            out = staging / relative
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(render(template.read_text(encoding="utf-8"), mapping), encoding="utf-8")
            result.files.append(relative.as_posix())
        if lock:
            result.lock_error = uv_lock(staging, log) or _export_runtime_lock(staging, mapping["package"])
            result.locked = result.lock_error is None
            if result.locked:
                result.files += ["uv.lock", f"{mapping['package']}/{runtime_lock.LOCK_NAME}"]
        else:
            result.lock_error = "skipped (--no-lock)"
        try:
            publish_folder(staging, target, REFUSE)
        except FileExistsError:
            raise ScaffoldError(f"DIR {target} appeared while generating; nothing was written there") from None
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    result.files.sort()
    return result
