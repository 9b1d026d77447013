"""Engine packages are split by interpreter (docs/plugins.md, "Package layout"), checked by reading their imports.

Host test suite, stdlib `ast` only: no engine module is imported. For the two
shipped engines, a package `tt engines new` generates and the tutorial's parrot
engine (docs/plugins.md):

- the host side (the package's top level: plugin.py, spec.py, doctor checks,
  ...) never imports a module under `decode/`, `runtime/`, `stages/` or
  `serve/`, which run only in the engine environment;
- `decode/`, `runtime/`, `stages/`, `serve/` and `formats/` never import the
  host side nor `tt_host` (the engine environment has no tt_host);
- `formats/`, the code both sides read, imports only the standard library,
  `tt_stagekit` and `formats/` itself;
- the engine side's folders are ordered, bottom to top `formats/` <
  `decode/` < `runtime/` < `stages/`, `serve/` (ENGINE_ORDER): a folder
  imports its own modules and the folders below it, never one above it nor
  its neighbour in the same row (no arrow back up: GRPO's rollouts in
  `runtime/` use the decoder in `decode/`, never the server in `serve/`);
- no module imports itself back through others (no circle; the foundation's
  doctor.py and plugin.py once imported each other);
- the foundation's checkpoints (`runtime/checkpoints/`) are imported through
  the package, never one of its submodules, by anything outside it.

`testing/` (test helpers for the engine's tests and tt's end-to-end tests) is
neither side and is not checked. Every import counts, a function's lazy one too.
"""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import REPO, TT_BIN, base_env
from test_host_layout import circles, graph

SHARED = "formats"
# Bottom to top: an engine-side folder imports only its own modules and the rows before its own.
ENGINE_ORDER = ((SHARED,), ("decode",), ("runtime",), ("stages", "serve"))
ENGINE_SIDE = tuple(folder for row in ENGINE_ORDER[1:] for folder in row)
RANK = {folder: rank for rank, row in enumerate(ENGINE_ORDER) for folder in row}
TEST_HELPERS = "testing"
SHIPPED = {"foundation": REPO / "plugins" / "foundation" / "tt_engine_foundation",
           "adapter": REPO / "plugins" / "adapter" / "tt_engine_adapter"}


@dataclass(frozen=True)
class Import:
    module: str  # the importing module, dotted
    line: int
    target: str  # the imported module (for `from X import name`: X.name when that is a module of the package)


def package_modules(root: Path) -> dict[str, Path]:
    """Dotted name -> file of every module of the package at `root`."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imports(root: Path) -> list[Import]:
    modules = package_modules(root)
    found = []
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                found += [Import(name, node.lineno, alias.name) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the importing module's package
                    anchor = name.split(".") if is_package else name.split(".")[:-1]
                    anchor = anchor[:len(anchor) - node.level + 1]
                    base = ".".join(anchor + ([node.module] if node.module else []))
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    found.append(Import(name, node.lineno, full if full in modules else base))
    return found


def folder(module: str) -> str:
    """The first folder under the package of a dotted module name (its top-level module's name at the top)."""
    return module.split(".")[1] if "." in module else ""


def part(package: str, module: str) -> str | None:
    """'host', 'formats', 'engine' or 'testing' for a module of `package`; None for another package's."""
    if module != package and not module.startswith(package + "."):
        return None
    first = folder(module)
    if first in ENGINE_SIDE:
        return "engine"
    if first in (SHARED, TEST_HELPERS):
        return first
    return "host"


def upward(module: str, target: str) -> bool:
    """Whether an engine-side `module` importing `target` (engine side or formats/) breaks ENGINE_ORDER."""
    return folder(module) != folder(target) and RANK[folder(target)] >= RANK[folder(module)]


def below(name: str) -> str:
    """The folders an engine-side folder may import besides itself, for a message."""
    return ", ".join(f"{other}/" for other, rank in RANK.items() if rank < RANK[name])


def stdlib_or_stagekit(module: str) -> bool:
    top = module.split(".")[0]
    return top in sys.stdlib_module_names or top in ("__future__", "tt_stagekit")


def layout_problems(root: Path) -> list[str]:
    """Every import that breaks the layout rule in the package at `root`, as `file:line: ...`."""
    package = root.name
    modules = package_modules(root)
    problems = []
    for found in imports(root):
        source, target = part(package, found.module), part(package, found.target)
        where = f"{modules[found.module].relative_to(root.parent)}:{found.line}: {found.module} imports {found.target}"
        if source == "host" and target == "engine":
            problems.append(f"{where}, which runs only in the engine environment "
                            f"({', '.join(name + '/' for name in ENGINE_SIDE)})")
        elif source in ("engine", SHARED) and (target == "host" or found.target.split(".")[0] == "tt_host"):
            problems.append(f"{where}: {source} code runs in the engine environment, where tt_host is missing; "
                            "it never imports tt_host or the host side")
        elif source == SHARED and target != SHARED and not stdlib_or_stagekit(found.target):
            problems.append(f"{where}: formats/ imports only the standard library, tt_stagekit and formats/")
        elif source == "engine" and target in ("engine", SHARED) and upward(found.module, found.target):
            name = folder(found.module)
            problems.append(f"{where}: an arrow back up; {name}/ imports only {below(name)} and itself (bottom to "
                            f"top: {' < '.join(', '.join(f + '/' for f in row) for row in ENGINE_ORDER)})")
    return list(dict.fromkeys(problems))  # `from X import a, b` is one import


@pytest.fixture(scope="module")
def scaffolded(tmp_path_factory) -> Path:
    """The package `tt engines new` writes (not locked: only its files are read)."""
    folder = tmp_path_factory.mktemp("scaffold") / "tt-engine-layoutcheck"
    env = base_env(folder.parent, [])
    proc = subprocess.run([TT_BIN, "engines", "new", "layoutcheck", str(folder), "--no-lock", "--json"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["path"] == str(folder)
    return folder / "tt_engine_layoutcheck"


@pytest.mark.parametrize("engine", sorted(SHIPPED))
def test_shipped_engine_is_split_by_interpreter(engine):
    root = SHIPPED[engine]
    assert (root / "plugin.py").is_file() and (root / SHARED / "__init__.py").is_file()
    assert not layout_problems(root), "\n".join(layout_problems(root))
    assert circles(graph(root.parent, root.name)) == []


def test_foundation_checkpoints_are_imported_through_their_package():
    """runtime/checkpoints/ has one entry point, its __init__: no module outside it (the engine's, the engine's
    tests, tt's tests, the benches) imports one of its submodules."""
    root = SHIPPED["foundation"]
    package = "tt_engine_foundation.runtime.checkpoints"
    submodules = {f"{package}.{path.stem}" for path in (root / "runtime" / "checkpoints").glob("*.py")}
    found = [(f"{i.module}:{i.line}", i.target) for i in imports(root) if not i.module.startswith(package)]
    for path in sorted([*(root.parent / "tests").rglob("*.py"), *(REPO / "tests").rglob("*.py"),
                        *(REPO / "bench").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            where = f"{path.relative_to(REPO)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.ImportFrom) and node.module:
                found += [(where, node.module)] + [(where, f"{node.module}.{alias.name}") for alias in node.names]
            elif isinstance(node, ast.Import):
                found += [(where, alias.name) for alias in node.names]
    wrong = [f"{where} imports {target}" for where, target in found if target in submodules - {f"{package}.__init__"}]
    assert not wrong, "import tt_engine_foundation.runtime.checkpoints itself:\n" + "\n".join(wrong)


def test_scaffolded_engine_is_split_by_interpreter(scaffolded):
    assert (scaffolded / "plugin.py").is_file() and (scaffolded / "stages" / "train.py").is_file()
    assert not layout_problems(scaffolded), "\n".join(layout_problems(scaffolded))


def test_tutorial_engine_is_split_by_interpreter(tmp_path):
    from plugin_tutorial_support import write_tutorial

    root = write_tutorial(tmp_path)["tt-engine-parrot/tt_engine_parrot/plugin.py"].parent
    assert (root / "runtime" / "protocol.py").is_file()
    assert not layout_problems(root), "\n".join(layout_problems(root))


def test_the_check_sees_each_kind_of_break(tmp_path):
    """A package breaking each rule once (relative imports, `from package import module`, a lazy import)."""
    root = tmp_path / "tt_engine_broken"
    files = {
        "__init__.py": "",
        "plugin.py": "from tt_engine_broken import spec\n\ndef doctor():\n    from .runtime import model\n",
        "spec.py": "import tt_host.engine\nfrom tt_engine_broken.formats import rows\n",
        "formats/__init__.py": "",
        "formats/rows.py": "import json\nfrom tt_stagekit import chatrows\nimport numpy\nfrom ..spec import X\n",
        "runtime/__init__.py": "",
        "runtime/model.py": "import torch\nfrom tt_engine_broken import formats\nfrom tt_engine_broken.plugin import ENGINE\n"
                            "\ndef later():\n    from ..stages import train\n",
        "stages/__init__.py": "",
        "stages/train.py": "from tt_host.engine import Stage\nfrom tt_engine_broken.runtime import model\n",
        "testing/__init__.py": "from tt_engine_broken.runtime import model\nimport tt_host\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    found = layout_problems(root)
    expected = [
        "tt_engine_broken/plugin.py:4: tt_engine_broken.plugin imports tt_engine_broken.runtime.model",
        "tt_engine_broken/formats/rows.py:3: tt_engine_broken.formats.rows imports numpy",
        "tt_engine_broken/formats/rows.py:4: tt_engine_broken.formats.rows imports tt_engine_broken.spec",
        "tt_engine_broken/runtime/model.py:3: tt_engine_broken.runtime.model imports tt_engine_broken.plugin",
        "tt_engine_broken/runtime/model.py:6: tt_engine_broken.runtime.model imports tt_engine_broken.stages.train: "
        "an arrow back up",
        "tt_engine_broken/stages/train.py:1: tt_engine_broken.stages.train imports tt_host.engine",
    ]
    assert len(found) == len(expected), "\n".join(found)
    for start in expected:
        assert any(problem.startswith(start) for problem in found), f"{start!r} not reported:\n" + "\n".join(found)


# One import planted in a copy of a shipped engine, each back up its engine's order (the first is the arrow
# GRPO's rollouts had into the server before decode/ held the decoder; a lazy one and a relative one count).
PLANTED = [
    ("adapter", "runtime/rollouts.py", "from tt_engine_adapter.serve.batching import Scheduler\n",
     "tt_engine_adapter.serve.batching", "runtime/ imports only formats/, decode/ and itself"),
    ("adapter", "decode/picker.py", "\n\ndef later():\n    from tt_engine_adapter.runtime import chat\n",
     "tt_engine_adapter.runtime.chat", "decode/ imports only formats/ and itself"),
    ("adapter", "serve/app.py", "from ..stages import evaluate\n",
     "tt_engine_adapter.stages.evaluate", "serve/ imports only formats/, decode/, runtime/ and itself"),
    ("foundation", "runtime/sft.py", "import tt_engine_foundation.stages.sft\n",
     "tt_engine_foundation.stages.sft", "runtime/ imports only formats/, decode/ and itself"),
]


@pytest.mark.parametrize("engine, file, planted, target, says", PLANTED, ids=[p[1] for p in PLANTED])
def test_an_import_back_up_planted_in_a_shipped_engine_is_found(tmp_path, engine, file, planted, target, says):
    """A copy of the engine with one import added to `file` breaks exactly one rule, the order, at that line."""
    root = tmp_path / SHIPPED[engine].name
    shutil.copytree(SHIPPED[engine], root, ignore=shutil.ignore_patterns("__pycache__"))
    assert not layout_problems(root)
    text = (root / file).read_text(encoding="utf-8")
    (root / file).write_text(text + planted, encoding="utf-8")
    line = len(text.splitlines()) + len(planted.splitlines())
    module = f"{root.name}.{file.removesuffix('.py').replace('/', '.')}"
    assert layout_problems(root) == [
        f"{root.name}/{file}:{line}: {module} imports {target}: an arrow back up; {says} (bottom to top: formats/ < "
        "decode/ < runtime/ < stages/, serve/)"]


def test_the_order_names_every_engine_side_folder_of_the_shipped_engines():
    """A new folder of a shipped engine gets its place in ENGINE_ORDER (or is the test helpers' testing/)."""
    for engine, root in SHIPPED.items():
        folders = {path.name for path in root.iterdir() if (path / "__init__.py").is_file()}
        assert folders - {TEST_HELPERS} <= set(RANK), f"{engine}: {sorted(folders - set(RANK) - {TEST_HELPERS})}"
