"""Every Python tt starts runs with -P or -I: nothing from the current folder is importable in it.

`python -c CODE` and `python -m MOD` put the current folder first on `sys.path`, so a `json.py` in a cloned project
folder would run inside the child. This rule reads (AST) every process start in the host, the stage kit and the
shipped engines — `subprocess.run/Popen/call/check_call/check_output`, `os.exec*`/`os.spawn*`,
`asyncio.create_subprocess_exec` — and finds the command it starts: a list written at the call (or assigned to the
name it passes, in the same function), or `python_command(...)` (tt_host.engines.isolation: `python -P ...`). A
command whose program is a Python (`sys.executable`, a name with `python` in it) must carry "-P" or "-I" in that
list; a command built elsewhere must be listed in BUILT_ELSEWHERE with where its program comes from (a review,
not a pass: a new entry is a new start to check). The planted-module tests show the flags hold for real processes:
tests/host/cli/test_planted_module_never_runs.py.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [ROOT / "tt_host", ROOT / "sdk" / "stagekit" / "tt_stagekit",
           *sorted(p for p in (ROOT / "plugins").glob("*/tt_*") if p.is_dir())]
STARTS = {"run", "Popen", "call", "check_call", "check_output", "create_subprocess_exec", "execv", "execve",
          "execvp", "execvpe", "execl", "execlp", "spawnv", "spawnve", "spawnl"}
SAFE_BUILDERS = {"python_command"}
FLAGS = {"-P", "-I"}
# file (relative to the repository): the command variables passed in from elsewhere, and what they start
BUILT_ELSEWHERE = {
    "tt_host/engines/envs.py": "uv sync (envs.build_environment: the uv binary, --no-config)",
    "tt_host/engines/installer.py": "uv pip install/uninstall (installer._uv: the uv binary)",
    "tt_host/engines/runtime_lock.py": "uv export (export_command: the uv binary)",
    "tt_host/engines/scaffold.py": "uv lock (the uv binary)",
    "tt_host/models/serve.py": "the engine's server: python_command(python, ...) in serve.start (-P)",
}


def _calls(tree: ast.AST):
    """(call, innermost enclosing function or the module) for every process start in the module."""
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in STARTS
                and isinstance(node.func.value, ast.Name) and node.func.value.id in {"subprocess", "os", "asyncio"}):
            scope = parents.get(node)
            while scope is not None and not isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
                scope = parents.get(scope)
            yield node, scope or tree


def _command(call: ast.Call, func: ast.AST) -> list[ast.AST | None]:
    """The expressions the started command may be: the first argument, traced through every assignment to the
    name it passes in the same function (and through `name + [...]`)."""
    arg = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg in ("args", "path")), None)
    if call.func.attr.startswith(("exec", "spawn")) and len(call.args) > 1:  # os.execv(path, argv): the argv
        arg = call.args[1]
    if isinstance(arg, ast.BinOp):  # [python, "-P"] + extra, or command + extra
        arg = arg.left
    if isinstance(arg, ast.Name):
        assigned = [n.value for n in ast.walk(func) if isinstance(n, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == arg.id for t in n.targets) and n.lineno < call.lineno]
        return assigned or [arg]
    return [arg]


def _problem(command: ast.AST | None) -> str | None:
    """None when the command is not a Python or carries -P/-I; else why not; "elsewhere" for a passed-in name."""
    if isinstance(command, ast.Call):
        name = command.func.attr if isinstance(command.func, ast.Attribute) else getattr(command.func, "id", "")
        return None if name in SAFE_BUILDERS else "elsewhere"
    if isinstance(command, ast.BinOp):
        return _problem(command.left)
    if not isinstance(command, (ast.List, ast.Tuple)) or not command.elts:
        return "elsewhere"
    program = ast.unparse(command.elts[0]).lower()
    if "executable" not in program and "python" not in program:
        return None
    flags = {e.value for e in command.elts if isinstance(e, ast.Constant)}
    return None if flags & FLAGS else f"starts {ast.unparse(command.elts[0])} without -P or -I"


def unsafe_starts() -> list[str]:
    found = []
    for source in SOURCES:
        for path in sorted(source.rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            for call, func in _calls(ast.parse(path.read_text(encoding="utf-8"))):
                problem = next(filter(None, map(_problem, _command(call, func))), None)
                if problem == "elsewhere" and rel in BUILT_ELSEWHERE:
                    continue
                if problem == "elsewhere":
                    problem = "a command built elsewhere: build it with python_command or list it in BUILT_ELSEWHERE"
                if problem:
                    found.append(f"{rel}:{call.lineno}: {problem}")
    return found


def test_every_python_tt_starts_runs_with_safe_path():
    found = unsafe_starts()
    assert not found, "a Python started without -P/-I imports from the current folder:\n" + "\n".join(found)


def test_the_rule_sees_the_starts_it_guards():
    """The rule is not vacuous: it finds the host's known starts and flags a start written without the flag."""
    bad = ast.parse("import subprocess, sys\ndef f():\n    cmd = [sys.executable, '-c', 'x']\n    subprocess.run(cmd)\n")
    ((call, func),) = list(_calls(bad))
    assert [_problem(c) for c in _command(call, func)] == ["starts sys.executable without -P or -I"]
    seen = sum(1 for source in SOURCES for path in source.rglob("*.py")
               for _ in _calls(ast.parse(path.read_text(encoding="utf-8"))))
    assert seen >= 15, seen
