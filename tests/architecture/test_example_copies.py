"""A test copies a shipped example only through `tracked_copy` (tests/example_copy_support.py): git's tracked
files, never what a user's runs, links and exports left in the clone (docs/testing.md "What tt writes inside the
clone").

Read from the source with `ast`: no test module calls a `shutil` copy (`copytree`, `copy`, `copy2`, `copyfile`)
whose source argument names `examples`, directly or through a module-level name bound to such a path.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
COPIERS = {"copytree", "copy", "copy2", "copyfile"}
TEST_ROOTS = [REPO / "tests", *sorted((REPO / "plugins").glob("*/tests"))]


def _module_names(tree: ast.Module) -> dict[str, str]:
    """Module-level `NAME = expression` bindings, as source text."""
    names = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    names[target.id] = ast.unparse(node.value)
    return names


def example_copies(source: str, filename: str) -> list[str]:
    """Each `shutil` copy in `source` whose source argument names the examples folder, as `file:line: code`."""
    tree = ast.parse(source, filename)
    names = _module_names(tree)
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and node.args):
            continue
        called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if called not in COPIERS:
            continue
        argument = node.args[0]
        text = ast.unparse(argument)
        text += " " + " ".join(names.get(n.id, "") for n in ast.walk(argument) if isinstance(n, ast.Name))
        if "examples" in text:
            found.append(f"{filename}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_test_copies_an_example_with_what_the_clone_holds():
    found = []
    for root in TEST_ROOTS:
        for path in sorted(root.rglob("*.py")):
            if ".venv" in path.parts or path.name == "example_copy_support.py":
                continue
            found += example_copies(path.read_text(encoding="utf-8"), str(path.relative_to(REPO)))
    assert not found, ("these tests copy an example with whatever the clone holds (a user's runs, links, exports): "
                       "copy it with example_copy_support.tracked_copy instead:\n" + "\n".join(found))


def test_the_rule_sees_a_planted_copy_directly_and_through_a_name():
    planted = ("import shutil\nfrom pathlib import Path\nEXAMPLE = Path('x') / 'examples' / 'foundation'\n"
               "def t(tmp):\n    shutil.copytree(EXAMPLE, tmp)\n    shutil.copytree(Path('examples/adapter'), tmp)\n"
               "    shutil.copytree(tmp / 'model', tmp / 'other')\n")
    assert [line.split(":")[1] for line in example_copies(planted, "planted.py")] == ["5", "6"]
