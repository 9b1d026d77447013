"""The tutorial in docs/plugins.md as files: its titled code blocks written out under a folder
(tests/host/plugins/test_plugins_tutorial.py runs them; tests/architecture/test_engine_layout.py checks their layout)."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import REPO

GUIDE = REPO / "docs" / "plugins.md"
FENCE = re.compile(r'^```(\w+)(?: title="([^"]+)")?\n(.*?)^```$', re.M | re.S)


def blocks() -> list[tuple[str, str | None, str]]:
    return FENCE.findall(GUIDE.read_text())


def write_tutorial(root: Path) -> dict[str, Path]:
    files = {}
    for lang, title, body in blocks():
        if title:
            assert title not in files, f"two blocks titled {title}"
            path = root / title
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(body)
            files[title] = path
    return files
