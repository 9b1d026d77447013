"""A local lm-eval task file is data: parsed without running anything, refused when it would run code.

lm-eval's own loader turns `!function utils.process_docs` into an import of `utils.py` beside the task
(and `!!python/...` tags into Python objects), and follows `include:` anywhere. A task file someone else
wrote must not run code on the user's machine, so before lm-eval sees it, tt reads it as YAML nodes
(`yaml.compose`: nothing constructed) and refuses, naming file and line:

- any tag that is not plain YAML data (`!function`, `!!python/name:...`, any other `!tag`);
- an `include:` that is not a relative or absolute path to a file inside the task's own folder (no `..`
  out of it, no link leading out), and, recursively, any of the above in an included file;
- `dataset_kwargs.trust_remote_code` (a dataset loading script is code);
- a YAML merge key (`<<: {include: x.yaml}`): lm-eval's loader applies the merge, so a key it brings in
  (an `include:`, `trust_remote_code`) would escape the checks above; write the keys out instead.

`TT_ALLOW_TASK_CODE=1`, set by the user outside the spec, lets `!function` through (lm-eval then imports
the task folder's Python files); the run announces it. Only the exact value `1` opts in (`0`, `true`, ` 1`
do not). Everything else is refused either way.

The host checks at `tt validate` / `tt run` (exit 2); the gate stages check again before lm-eval loads the
file (tt_stagekit.benchmarks), where templates are also rendered in a sandboxed Jinja environment.
PyYAML is imported inside the functions: the host has it, and every engine environment that runs lm-eval.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Optional

from tt_stagekit.userinput import InputFileError, read_regular

ALLOW_CODE_VAR = "TT_ALLOW_TASK_CODE"
MAX_TASK_FILE_BYTES = 1024 * 1024
MAX_INCLUDE_DEPTH = 8
DATA_TAGS = {f"tag:yaml.org,2002:{name}" for name in
             ("str", "int", "float", "bool", "null", "map", "seq", "timestamp", "binary", "omap",
              "pairs", "set")}
CODE_TAG = "!function"
MERGE_TAG = "tag:yaml.org,2002:merge"


class TaskFileError(ValueError):
    """A task file that is not plain data; the message names file and line."""


def code_allowed(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the user opted in to running code from task folders: TT_ALLOW_TASK_CODE is exactly `1`."""
    return environ.get(ALLOW_CODE_VAR) == "1"


def check_task_file(path: Path, allow_code: bool = False) -> None:
    """Raise TaskFileError naming file:line when the task file (or a file it includes) is not plain data."""
    path = Path(path)
    _check(path, path.parent.resolve(), allow_code, [])


def task_file_problem(path: Path, allow_code: bool = False) -> Optional[str]:
    try:
        check_task_file(path, allow_code)
    except TaskFileError as exc:
        return str(exc)
    return None


def _check(path: Path, folder: Path, allow_code: bool, seen: list[Path]) -> None:
    import yaml

    if len(seen) > MAX_INCLUDE_DEPTH:
        raise TaskFileError(f"{seen[0]}: includes nest deeper than {MAX_INCLUDE_DEPTH} files")
    real = path.resolve()
    if real in seen:
        raise TaskFileError(f"{path}: includes itself (through {', '.join(p.name for p in seen)})")
    try:  # a regular file only, capped: a FIFO or /dev/zero planted as a task file never blocks or fills memory
        text = read_regular(path, MAX_TASK_FILE_BYTES)
    except InputFileError as exc:
        raise TaskFileError(f"{exc} (a task file is a short YAML file)") from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        raise TaskFileError(f"{path}{where}: not readable YAML ({getattr(exc, 'problem', None) or exc})") from None
    if root is None:
        return
    _tags(root, path, allow_code, set())
    if isinstance(root, yaml.MappingNode):
        for key, value in root.value:
            name = key.value if isinstance(key, yaml.ScalarNode) else None
            if name == "include":
                for target, line in _paths(value, path):
                    _check(_inside(target, path, line, folder), folder, allow_code, seen + [real])
            elif name == "dataset_kwargs" and isinstance(value, yaml.MappingNode):
                for sub, _ in value.value:
                    if isinstance(sub, yaml.ScalarNode) and sub.value == "trust_remote_code":
                        raise TaskFileError(f"{path}:{sub.start_mark.line + 1}: dataset_kwargs.trust_remote_code "
                                            "would run a dataset's loading script; remove it (task files are data)")


def _tags(node: Any, path: Path, allow_code: bool, visited: set[int]) -> None:
    """Refuse every tag that is not plain data (each node once: aliases do not multiply the walk)."""
    import yaml

    if id(node) in visited:
        return
    visited.add(id(node))
    if node.tag not in DATA_TAGS and not (allow_code and node.tag == CODE_TAG):
        line = node.start_mark.line + 1
        if node.tag == MERGE_TAG:
            raise TaskFileError(f"{path}:{line}: a YAML merge key (`<<`) brings in keys tt cannot check before "
                                "lm-eval applies it (an `include:` or `!function` hidden in the merged mapping); "
                                "write the merged keys out in the task file itself")
        if node.tag == CODE_TAG:
            raise TaskFileError(f"{path}:{line}: `!function {node.value!r}` would import and run Python from the task "
                                f"folder; task files are data. If you trust this folder's code, set "
                                f"{ALLOW_CODE_VAR}=1 in your environment (never in the spec) and run again")
        raise TaskFileError(f"{path}:{line}: the tag {node.tag!r} is not plain YAML data; task files may hold "
                            "only strings, numbers, lists and mappings: remove it")
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            _tags(key, path, allow_code, visited)
            _tags(value, path, allow_code, visited)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _tags(item, path, allow_code, visited)


def _paths(node: Any, path: Path) -> list[tuple[str, int]]:
    import yaml

    items = node.value if isinstance(node, yaml.SequenceNode) else [node]
    out = []
    for item in items:
        if not isinstance(item, yaml.ScalarNode) or not item.value.strip():
            raise TaskFileError(f"{path}:{item.start_mark.line + 1}: include must be a file name or a list of them")
        out.append((item.value, item.start_mark.line + 1))
    return out


def _inside(target: str, path: Path, line: int, folder: Path) -> Path:
    """The included file, when it lies in the task's folder (links resolved); else TaskFileError."""
    candidate = Path(target).expanduser()
    candidate = candidate if candidate.is_absolute() else path.parent / candidate
    real = candidate.resolve()
    if real != folder and folder not in real.parents:
        raise TaskFileError(f"{path}:{line}: include {target!r} lies outside the task folder {folder}; copy the "
                            "file into the folder (every file there is part of the task's digest)")
    return candidate
