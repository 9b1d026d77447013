"""A shipped example copied for a test as the repository holds it: git's tracked files only.

A user's clone holds what tt wrote there (the quickstart's `.tuned-tensor/runs/`, the real base's link
`examples/adapter-real/smollm2-135m-instruct`, exports, caches); a test that copies an example with `copytree`
carries all of it into its temporary folder and then trips on it (docs/testing.md "What tt writes inside the
clone"). Every test that needs an example's folder copies it through `tracked_copy`; the rule test
tests/architecture/test_example_copies.py fails on a test that copies from `examples/` another way.

Outside a git checkout (an unpacked archive) the folder is copied without the entries tt and the quickstart write
there, the names listed in WRITTEN_BY_TT.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# what tt and the quickstart write inside an example's folder (kept in step with .gitignore and docs/testing.md)
WRITTEN_BY_TT = (".tuned-tensor", "smollm2-135m-instruct", "__pycache__")


def _tracked(relative: str) -> list[str] | None:
    try:
        listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "--", relative], capture_output=True,
                                timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    names = [name for name in listed.stdout.decode().split("\0") if name]
    return names if listed.returncode == 0 and names else None


def tracked_copy(example: str | Path, into: Path) -> Path:
    """Copy the example folder `example` (relative to the repository, e.g. "examples/foundation", or an absolute
    path inside it) to the folder `into` (created; `into` becomes the example's folder) and return `into`. Only
    git-tracked files are copied, with their modes."""
    relative = Path(example).resolve().relative_to(REPO) if Path(example).is_absolute() else Path(example)
    into.mkdir(parents=True, exist_ok=True)
    names = _tracked(str(relative))
    if names is None:  # not a git checkout: everything but what tt writes
        shutil.copytree(REPO / relative, into, dirs_exist_ok=True, ignore=shutil.ignore_patterns(*WRITTEN_BY_TT))
        return into
    for name in names:
        target = into / Path(name).relative_to(relative)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / name, target)
        shutil.copymode(REPO / name, target)
    return into
