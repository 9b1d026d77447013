"""The host's layout holds: its import graph, read from the source with `ast`, has no circle, and each wing
imports only the wings below it (docs/host.md, the map). tt_stagekit has no circle either.

Every import counts, the ones inside functions too (a lazy import is still a dependency); imports under
`if TYPE_CHECKING:` do not (annotations only). A new top-level module or wing must be given its place in
WINGS, which is the map of docs/host.md read from bottom to top.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# Bottom to top: a wing may import the wings before it, never one after it.
WINGS = (
    ("tt_host", "tt_host.canonical", "tt_host.errors", "tt_host.fsutil", "tt_host.ids",
     "tt_host.runlayout", "tt_host.terminal"),  # no tt_host imports
    ("tt_host.engine", "tt_host.hookspecs"),  # the plugin API's records and hooks
    ("tt_host.plugins",),
    ("tt_host.spec",),
    ("tt_host.engines",),
    ("tt_host.models",),
    ("tt_host.synthesis",),
    ("tt_host.evaluation",),
    ("tt_host.reports",),  # what tells what a run did: report.json's one writer (test_report_owner.py)
    ("tt_host.pipelines",),
    ("tt_host.runs",),
    ("tt_host.sweeps",),  # tt sweep: trials are runs (tt_host.runs.drive)
    ("tt_host.checks",),
    ("tt_host.api",),  # the plugins' front door (tests/architecture/test_front_door.py)
    ("tt_host.cli",),
)


def modules(root: Path, package: str) -> dict[str, Path]:
    found = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(path: Path, name: str, known: dict[str, Path]) -> set[str]:
    """The modules of `known` that `name` imports (at any depth of the file, TYPE_CHECKING blocks aside)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()

    class Visitor(ast.NodeVisitor):
        def visit_If(self, node: ast.If) -> None:
            if "TYPE_CHECKING" not in ast.unparse(node.test):
                self.generic_visit(node)

        def visit_Import(self, node: ast.Import) -> None:
            out.update(alias.name for alias in node.names)

        def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            out.add(module)
            out.update(f"{module}.{alias.name}" for alias in node.names)  # `from pkg import module`

    Visitor().visit(ast.parse(path.read_text(encoding="utf-8"), str(path)))
    return {module for module in out if module in known and module != name}


def graph(root: Path, package: str) -> dict[str, set[str]]:
    known = modules(root, package)
    return {name: imports(path, name, known) for name, path in known.items()}


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Each strongly connected group of more than one module (Tarjan), as a sorted list."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(edges.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def wing_of(module: str) -> tuple[int, str]:
    """(rank, wing) of a module: the longest WINGS entry it is, or is inside."""
    best = None
    for rank, wings in enumerate(WINGS):
        for wing in wings:
            if (module == wing or module.startswith(wing + ".")) and (best is None or len(wing) > len(best[1])):
                best = (rank, wing)
    if best is None:
        raise AssertionError(f"{module} belongs to no wing: give it its place in WINGS and in docs/host.md's map")
    return best


def upward(edges: dict[str, set[str]]) -> list[str]:
    wrong = []
    for module, targets in sorted(edges.items()):
        rank, wing = wing_of(module)
        for target in sorted(targets):
            target_rank, target_wing = wing_of(target)
            if target_wing != wing and target_rank >= rank:
                wrong.append(f"{module} imports {target} ({target_wing} is not below {wing})")
    return wrong


def test_the_host_has_no_import_circle():
    assert circles(graph(REPO, "tt_host")) == []


def test_each_host_wing_imports_only_the_wings_below_it():
    assert upward(graph(REPO, "tt_host")) == []


def test_the_stagekit_has_no_import_circle():
    assert circles(graph(REPO / "sdk" / "stagekit", "tt_stagekit")) == []


@pytest.mark.parametrize("source, expected", [
    ({"tt_host/a.py": "from tt_host import b\n", "tt_host/b.py": "def f():\n    import tt_host.a\n"},
     [["tt_host.a", "tt_host.b"]]),
    ({"tt_host/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from tt_host import b\n",
      "tt_host/b.py": "import tt_host.a\n"}, []),
])
def test_circles_are_found_in_lazy_imports_and_not_in_annotations(tmp_path, source, expected):
    for name, text in {"tt_host/__init__.py": "", **source}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert circles(graph(tmp_path, "tt_host")) == expected


def test_an_import_from_a_higher_wing_is_refused(tmp_path):
    for name, text in {"tt_host/__init__.py": "", "tt_host/engines/__init__.py": "",
                       "tt_host/engines/envs.py": "from tt_host.models import registry\n",
                       "tt_host/models/__init__.py": "", "tt_host/models/registry.py": ""}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert upward(graph(tmp_path, "tt_host")) == [
        "tt_host.engines.envs imports tt_host.models (tt_host.models is not below tt_host.engines)",
        "tt_host.engines.envs imports tt_host.models.registry (tt_host.models is not below tt_host.engines)"]


@pytest.mark.parametrize("module, target", [
    ("tt_host.evaluation.baseline_cache", "tt_host.runs.store"),  # the arrow back up runs/layout.py was, once
    ("tt_host.reports.report", "tt_host.runs.drive"),  # the reports wing reaching back into the driver
    ("tt_host.runlayout", "tt_host.reports.ending"),  # the bottom importing a wing
])
def test_a_planted_arrow_back_up_in_the_real_host_fails_the_layout(module, target):
    edges = graph(REPO, "tt_host")
    assert module in edges and target in edges
    assert upward(edges) == []
    edges[module] = edges[module] | {target}
    assert upward(edges) == [f"{module} imports {target} ({wing_of(target)[1]} is not below {wing_of(module)[1]})"]
