"""What makes a test able to back a promise, read from its source (tests/architecture/test_promises.py).

A promised test must be one pytest collects (a module-level `def test_*`, or a `test_*` method of a module-level
`Test*` class), and must be able to fail: it asserts (an `assert`, `pytest.raises`/`pytest.fail`, an `assert*`
call such as `torch.testing.assert_close`, or a call of a helper that does, followed through the test's module and
the local modules it imports: its folder's, `tests/`' support modules, the engine's `tests/`), it never returns
(a test that returns before its assertions passes without checking anything; skip with a reason instead), and
every skip it can take states why (`pytest.mark.skip`/`skipif` with a `reason`, `pytest.skip("why")`, on the
test, its class or the module's `pytestmark`). Static, so it judges an engine's tests without its environment.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Optional

FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
SCOPES = FUNCTIONS + (ast.Lambda, ast.ClassDef)
MAX_DEPTH = 6  # helpers calling helpers: deeper than this is not followed


def collected_tests(source: str) -> set[str]:
    """The test names pytest collects from a module's source (its default naming rules)."""
    return set(_tests(ast.parse(source)))


def _tests(tree: ast.Module) -> dict[str, tuple[ast.AST, Optional[ast.ClassDef]]]:
    found: dict[str, tuple[ast.AST, Optional[ast.ClassDef]]] = {}
    for node in tree.body:
        if isinstance(node, FUNCTIONS) and node.name.startswith("test"):
            found[node.name] = (node, None)
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            for item in node.body:
                if isinstance(item, FUNCTIONS) and item.name.startswith("test"):
                    found[item.name] = (item, node)
    return found


def _dotted(node: ast.AST) -> str:
    """`pytest.mark.skipif` for that expression (a call's function), '' for anything else."""
    if isinstance(node, ast.Call):
        return _dotted(node.func)
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else ""
    return node.id if isinstance(node, ast.Name) else ""


def _states_a_reason(call: ast.AST, positional: int) -> bool:
    """Whether a skip mark or call gives a non-empty reason: `reason=`, or the `positional`-th argument."""
    if not isinstance(call, ast.Call):
        return False  # a bare `@pytest.mark.skip`
    texts = [k.value for k in call.keywords if k.arg in ("reason", "msg")]
    if len(call.args) > positional:
        texts.append(call.args[positional])
    return any(not (isinstance(t, ast.Constant) and not t.value) for t in texts)


def bare_skip_marks(marks: list[ast.AST]) -> list[str]:
    """The skip marks among `marks` (decorators or `pytestmark` items) that state no reason."""
    bad = []
    for mark in marks:
        name = _dotted(mark)
        if name.endswith("mark.skip") and not _states_a_reason(mark, 0):
            bad.append(f"line {mark.lineno}: pytest.mark.skip without a reason")
        elif name.endswith("mark.skipif") and not _states_a_reason(mark, 10**6):
            bad.append(f"line {mark.lineno}: pytest.mark.skipif without reason=")
    return bad


def _module_marks(tree: ast.Module) -> list[ast.AST]:
    marks: list[ast.AST] = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
            value = node.value
            marks += list(value.elts) if isinstance(value, (ast.List, ast.Tuple)) else [value]
    return marks


def _own_nodes(func: ast.AST) -> Iterator[ast.AST]:
    """Every node of a function's body outside the functions, lambdas and classes defined in it."""
    stack = list(ast.iter_child_nodes(func))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, SCOPES):
            stack.extend(ast.iter_child_nodes(node))


@dataclass
class Modules:
    """Parsed local modules, found by name in `folders` (a test module's own folder first)."""

    folders: tuple[Path, ...]
    parsed: dict[str, Optional[ast.Module]] = field(default_factory=dict)

    def get(self, name: str) -> Optional[ast.Module]:
        if name not in self.parsed:
            self.parsed[name] = None
            for folder in self.folders:
                path = folder / f"{name}.py"
                if path.is_file():
                    self.parsed[name] = ast.parse(path.read_text())
                    break
        return self.parsed[name]


def _definitions(tree: ast.Module, modules: Modules) -> dict[str, tuple[ast.AST, ast.Module]]:
    """The functions a module can call by a plain name or `module.name`: its own, and those it imports from a
    local module (the name as a key; `module.name` for `import module`)."""
    names: dict[str, tuple[ast.AST, ast.Module]] = {}
    for node in tree.body:
        if isinstance(node, FUNCTIONS):
            names[node.name] = (node, tree)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            other = modules.get(node.module)
            if other is not None:
                defs = {n.name: n for n in other.body if isinstance(n, FUNCTIONS)}
                for alias in node.names:
                    if alias.name in defs:
                        names[alias.asname or alias.name] = (defs[alias.name], other)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                other = modules.get(alias.name)
                if other is not None:
                    for n in other.body:
                        if isinstance(n, FUNCTIONS):
                            names[f"{alias.asname or alias.name}.{n.name}"] = (n, other)
    return names


def _asserts(func: ast.AST, tree: ast.Module, modules: Modules, depth: int, seen: set[int]) -> bool:
    if id(func) in seen or depth > MAX_DEPTH:
        return False
    seen.add(id(func))
    defs = _definitions(tree, modules)
    nested = {n.name: n for n in ast.walk(func) if isinstance(n, FUNCTIONS) and n is not func}
    for node in ast.walk(func):
        if isinstance(node, ast.Assert):
            return True
        if not isinstance(node, ast.Call):
            continue
        name = _dotted(node)
        last = name.rsplit(".", 1)[-1]
        if name in ("pytest.raises", "pytest.fail", "raises") or last.startswith("assert"):
            return True
        if name in nested and _asserts(nested[name], tree, modules, depth + 1, seen):
            return True
        if name in defs and _asserts(defs[name][0], defs[name][1], modules, depth + 1, seen):
            return True
    return False


def problems(path: Path, name: str, folders: tuple[Path, ...]) -> list[str]:
    """Why `path::name` cannot back a promise (empty when it can). `folders`: where its local imports live."""
    if not path.is_file() or not path.name.startswith("test_"):
        return ["no such test module"]
    tree = ast.parse(path.read_text())
    tests = _tests(tree)
    if name not in tests:
        return ["pytest collects no test of that name there"]
    func, cls = tests[name]
    found = []
    marks = list(func.decorator_list) + (list(cls.decorator_list) if cls else []) + _module_marks(tree)
    found += bare_skip_marks(marks)
    for node in _own_nodes(func):
        if isinstance(node, ast.Return):
            found.append(f"line {node.lineno}: returns (a test that returns before its assertions passes without "
                         "checking anything: skip with a reason instead)")
        elif isinstance(node, ast.Call) and _dotted(node) == "pytest.skip" and not _states_a_reason(node, 0):
            found.append(f"line {node.lineno}: pytest.skip() without a reason")
    modules = Modules((path.parent,) + tuple(folders))
    if not _asserts(func, tree, modules, 0, set()):
        found.append("asserts nothing (no assert, pytest.raises, assert* call or helper that asserts)")
    return found
