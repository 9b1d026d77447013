"""Making plugins discoverable for tests through real entry points, without installing them.

A folder with `<name>-<version>.dist-info/{METADATA,entry_points.txt}` on
PYTHONPATH is exactly what `importlib.metadata` reads for an installed
distribution, so `tt` finds these plugins the way it finds pip-installed ones.
"""

from __future__ import annotations

import shutil
from pathlib import Path

TESTS = Path(__file__).resolve().parent
ECHO_SOURCE = TESTS / "engines" / "echo"
SDK = TESTS.parent / "sdk"


def add_distribution(site: Path, name: str, version: str, entry_points: dict[str, str],
                     modules: dict[str, str] | None = None) -> Path:
    site.mkdir(parents=True, exist_ok=True)
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    lines = ["[tt]"] + [f"{key} = {value}" for key, value in entry_points.items()]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    for module, source in (modules or {}).items():
        (site / f"{module}.py").write_text(source)
    return site


def echo_site(site: Path) -> list[str]:
    """PYTHONPATH entries that make the echo test engine an installed plugin."""
    add_distribution(site, "tt-engine-echo", "0.1.0", {"echo": "tt_engine_echo.plugin"})
    return [str(site), str(ECHO_SOURCE)]


def copy_echo(root: Path, ignore: tuple[str, ...] = ("__pycache__", "*.egg-info")) -> Path:
    """A private copy of the echo engine at `root/tests/engines/echo`, with `root/sdk` linked to tt's: its
    pyproject takes the stage kit from `../../../sdk/stagekit`, as the checkout's does."""
    project = root / "tests" / "engines" / "echo"
    shutil.copytree(ECHO_SOURCE, project, ignore=shutil.ignore_patterns(*ignore))
    (root / "sdk").symlink_to(SDK, target_is_directory=True)
    return project
