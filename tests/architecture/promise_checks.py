"""What makes a test able to back a promise, read from its source (tests/architecture/test_promises.py).

A promised test must be one pytest collects (a module-level `def test_*`, or a `test_*` method of a module-level
`Test*` class), and must be able to fail: it asserts (an `assert`, `pytest.raises`/`pytest.fail`, an `assert*`
call such as `torch.testing.assert_close`, or a call of a helper that does, followed through the test's module and
the local modules it imports: its folder's, `tests/`' support modules, the engine's `tests/`), it never returns
(a test that returns before its assertions passes without checking anything; skip with a reason instead), and
every skip it can take states why (`pytest.mark.skip`/`skipif` with a `reason`, `pytest.skip("why")`, on the
test, its class or the module's `pytestmark`). Static, so it judges an engine's tests without its environment.

An assertion counts only where it can fail the test (`unreached`): never one inside a `try` whose handler
catches its AssertionError (`except AssertionError`, `Exception`, `BaseException` or a bare `except`) and neither
re-raises, fails nor keeps the exception it caught (a handler that uses `as NAME` keeps it: recorded failures
asserted later), nor one in a branch the source shows is never taken: under a constant condition (`if False:`,
`while 0:`, `if not True:`), in a loop over an empty literal, or after a statement that always ends its block
(`return`, `raise`, `continue`, `break`, `pytest.skip()`, `sys.exit()`). The test's own such assertions are named.
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


def _asserting(node: ast.AST, func: ast.AST, tree: ast.Module, modules: Modules, depth: int, seen: set[int]) -> bool:
    """Whether `node` (of `func`'s body) is an assertion: an `assert`, an assertion call, or a call of a helper
    (nested in `func`, or one `tree` can call) that asserts."""
    if isinstance(node, ast.Assert):
        return True
    if not isinstance(node, ast.Call):
        return False
    name = _dotted(node)
    if name in ("pytest.raises", "pytest.fail", "raises") or name.rsplit(".", 1)[-1].startswith("assert"):
        return True
    nested = {n.name: n for n in ast.walk(func) if isinstance(n, FUNCTIONS) and n is not func}
    if name in nested:
        return _asserts(nested[name], tree, modules, depth + 1, seen)
    defs = _definitions(tree, modules)
    return name in defs and _asserts(defs[name][0], defs[name][1], modules, depth + 1, seen)


def _asserts(func: ast.AST, tree: ast.Module, modules: Modules, depth: int, seen: set[int]) -> bool:
    """Whether `func` has an assertion that can fail it (one `unreached` does not name)."""
    if id(func) in seen or depth > MAX_DEPTH:
        return False
    seen.add(id(func))
    hidden = unreached(func)
    return any(id(node) not in hidden and _asserting(node, func, tree, modules, depth, seen) for node in ast.walk(func))


SWALLOWS = ("AssertionError", "Exception", "BaseException")  # what an `except` catching an assert names
ENDS = ("pytest.skip", "pytest.xfail", "sys.exit", "os._exit", "exit", "quit")  # calls that never return


def _truth(test: ast.AST) -> Optional[bool]:
    """A condition's truth when the source fixes it (a constant, `not` a constant), else None."""
    if isinstance(test, ast.Constant):
        return bool(test.value)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _truth(test.operand)
        return None if inner is None else not inner
    return None


def _swallows(handler: ast.ExceptHandler) -> bool:
    """Whether an `except` catches an AssertionError and drops it (no raise, no pytest.fail, its `as` name unused)."""
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    if not any(kind is None or _dotted(kind).rsplit(".", 1)[-1] in SWALLOWS for kind in kinds):
        return False
    for node in ast.walk(ast.Module(body=handler.body, type_ignores=[])):
        if isinstance(node, ast.Raise) or (isinstance(node, ast.Call) and _dotted(node) == "pytest.fail"):
            return False
        if handler.name and isinstance(node, ast.Name) and node.id == handler.name:
            return False
    return True


def unreached(func: ast.AST) -> dict[int, str]:
    """The nodes of `func`'s own body (not its nested functions) whose assertion can never fail the test: id ->
    why (a branch the source shows is never taken, or a `try` whose handler swallows the AssertionError)."""
    hidden: dict[int, str] = {}

    def mark(statements: list[ast.stmt], why: str) -> None:
        for statement in statements:
            for node in ast.walk(statement):
                hidden.setdefault(id(node), why)

    def block(statements: list[ast.stmt]) -> bool:
        """Visit a block; whether it always ends (what follows it in its own block is never reached)."""
        for index, statement in enumerate(statements):
            if visit(statement):
                rest = statements[index + 1:]
                mark(rest, f"never reached: line {statement.lineno} always ends its block")
                return True
        return False

    def visit(node: ast.stmt) -> bool:
        if isinstance(node, (ast.Return, ast.Raise, ast.Continue, ast.Break)):
            return True
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            return _dotted(node.value) in ENDS
        if isinstance(node, (ast.If, ast.While)):
            truth = _truth(node.test)
            never = f"in a branch never taken: line {node.lineno}'s condition is constant"
            if truth is False:
                mark(node.body, never)
                return block(node.orelse) and bool(node.orelse) and isinstance(node, ast.If)
            if truth is True and isinstance(node, ast.If):
                mark(node.orelse, never)
                return block(node.body)
            body = block(node.body)
            return block(node.orelse) and body and bool(node.orelse) and isinstance(node, ast.If)
        if isinstance(node, (ast.For, ast.AsyncFor)):
            empty = isinstance(node.iter, (ast.List, ast.Tuple, ast.Set, ast.Dict)) and not (
                getattr(node.iter, "elts", None) or getattr(node.iter, "keys", None))
            if empty:
                mark(node.body, f"in a branch never taken: line {node.lineno} loops over an empty literal")
            else:
                block(node.body)
            block(node.orelse)
            return False
        if isinstance(node, (ast.With, ast.AsyncWith)):
            return block(node.body)
        if isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
            swallowing = [h for h in node.handlers if _swallows(h)]
            if swallowing:
                handler = swallowing[0]
                what = f"except {ast.unparse(handler.type)}" if handler.type is not None else "except"
                mark(node.body, f"swallowed: line {handler.lineno}'s `{what}` catches its AssertionError")
            block(node.body)
            for handler in node.handlers:
                block(handler.body)
            block(node.orelse)
            block(node.finalbody)
            return False
        if isinstance(node, ast.Match):
            for case in node.cases:
                block(case.body)
        return False

    block(list(getattr(func, "body", [])))
    return hidden


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
    own = {id(node): node for node in _own_nodes(func)}
    named: set[int] = set()
    for node_id, why in unreached(func).items():
        node = own.get(node_id)
        if not isinstance(node, (ast.Assert, ast.Call)) or node.lineno in named:
            continue
        if _asserting(node, func, tree, modules, 0, set()):
            named.add(node.lineno)
            found.append(f"line {node.lineno}: an assertion that can never fail the test ({why})")
    if not _asserts(func, tree, modules, 0, set()):
        found.append("asserts nothing (no assert, pytest.raises, assert* call or helper that asserts)")
    return found
