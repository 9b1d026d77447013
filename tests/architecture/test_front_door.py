"""Plugins reach the host through one front door, `tt_host.api` (docs/plugins.md, "The front door").

Every import of `tt_host` in a shipped engine's or observer's package, the echo test engine and the scaffold's
templates is `tt_host.api` (lazy imports inside functions included); docs/plugins.md's list of the front door is
the one `scripts/plugin-api-docs` writes from the module; every name the module lists is there.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FRONT_DOOR = "tt_host.api"


def plugin_sources(root: Path) -> list[Path]:
    """The plugin-side sources: each plugin package (its tests aside), the echo engine, the scaffold's plugin."""
    found = [p for p in sorted((root / "plugins").glob("*/tt_*/**/*.py"))]
    found += sorted((root / "tests" / "engines").glob("*/tt_*/**/*.py"))
    found += sorted((root / "tt_host" / "engines" / "scaffold_templates").rglob("*.py.tmpl"))
    return found


def back_doors(path: Path, root: Path) -> list[str]:
    """Each import of tt_host in `path` that is not the front door, as `file:line: import`."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".tmpl":  # a template's placeholders, {{name}}, as names
        text = re.sub(r"\{\{(\w+)\}\}", r"_\1_", text)
    wrong = []
    for node in ast.walk(ast.parse(text, str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            module = node.module or ""
            names = [f"{module}.{alias.name}" for alias in node.names] if module == "tt_host" else [module]
        else:
            continue
        for name in names:
            if (name == "tt_host" or name.startswith("tt_host.")) and name != FRONT_DOOR:
                wrong.append(f"{path.relative_to(root)}:{node.lineno}: {name}")
    return wrong


def test_plugins_import_nothing_of_the_host_but_the_front_door():
    sources = plugin_sources(REPO)
    assert len(sources) > 50  # the shipped engines, the observers, echo and the scaffold are all read
    wrong = [line for path in sources for line in back_doors(path, REPO)]
    assert wrong == [], "plugins must import the host through tt_host.api only:\n" + "\n".join(wrong)


def test_a_back_door_is_found(tmp_path):
    package = tmp_path / "plugins" / "x" / "tt_engine_x"
    package.mkdir(parents=True)
    (package / "plugin.py").write_text("from tt_host.api import Engine\nfrom tt_host import api\n\n"
                                       "def later():\n    from tt_host.engine import Stage\n    import tt_host.spec\n")
    assert back_doors(package / "plugin.py", tmp_path) == [
        "plugins/x/tt_engine_x/plugin.py:5: tt_host.engine", "plugins/x/tt_engine_x/plugin.py:6: tt_host.spec"]


def test_the_front_door_holds_every_name_it_lists_and_the_docs_list_it():
    from tt_host import api

    assert sorted(api.__all__) == sorted({name for names in api.SECTIONS.values() for name in names})
    assert all(hasattr(api, name) for name in api.__all__)
    check = subprocess.run([sys.executable, str(REPO / "scripts" / "plugin-api-docs"), "--check"],
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
