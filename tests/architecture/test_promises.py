"""docs/promises.md: every promise lists the test that backs it; a listed test that pytest would not collect fails.

An entry `path::name` counts only when `name` is a test pytest collects from
that file: a module-level `def test_*` (or a `test_*` method of a module-level
`Test*` class). A helper, a fixture or a function nested inside another (a name
that merely appears somewhere in the file) does not back a promise.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ENTRY = re.compile(r"`([\w/.-]+\.py)::(\w+)`")
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def collected_tests(source: str) -> set[str]:
    """The test names pytest collects from a module's source (its default naming rules)."""
    names = set()
    for node in ast.parse(source).body:
        if isinstance(node, FUNCTIONS) and node.name.startswith("test"):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            names |= {f.name for f in node.body if isinstance(f, FUNCTIONS) and f.name.startswith("test")}
    return names


def test_every_listed_test_exists():
    text = (REPO / "docs" / "promises.md").read_text()
    entries = ENTRY.findall(text)
    assert len(entries) >= 30, "docs/promises.md lists too few promises to be the full list"
    missing = []
    for path, name in entries:
        file = REPO / path
        names = collected_tests(file.read_text()) if file.is_file() and file.name.startswith("test_") else set()
        if name not in names:
            missing.append(f"{path}::{name}")
    assert not missing, f"docs/promises.md names tests that pytest does not collect: {missing}"


def test_only_collected_tests_count():
    source = '''
def helper(): pass
def test_real(): pass
def test_outer():
    def test_nested(): pass
class TestGroup:
    def test_method(self): pass
    def helper(self): pass
class Other:
    def test_not_collected(self): pass
'''
    assert collected_tests(source) == {"test_real", "test_outer", "test_method"}
