"""docs/promises.md: every promise lists the test that backs it; a listed test that no longer exists fails here."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ENTRY = re.compile(r"`([\w/.-]+\.py)::(\w+)`")


def test_every_listed_test_exists():
    text = (REPO / "docs" / "promises.md").read_text()
    entries = ENTRY.findall(text)
    assert len(entries) >= 30, "docs/promises.md lists too few promises to be the full list"
    missing = []
    for path, name in entries:
        file = REPO / path
        names = set()
        if file.is_file():
            names = {node.name for node in ast.walk(ast.parse(file.read_text()))
                     if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
        if name not in names:
            missing.append(f"{path}::{name}")
    assert not missing, f"docs/promises.md names tests that do not exist: {missing}"
