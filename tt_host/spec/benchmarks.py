"""Local lm-eval task files of `evaluation.benchmarks` (schema in tt_host.spec.schema): checks and digests.

A local task is a YAML file in lm-evaluation-harness's task format. Its data
(a JSON or JSONL file named in `dataset_kwargs.data_files`, say) lies beside
it, so the task is identified by every regular file of its folder: the
digest covers their names and contents, and changing any of them re-runs the
benchmark. That is why the task file must sit in a folder of its own, not in
the spec's folder (whose spec and run folders would then count as task data).
A task given by name (e.g. `arc_easy`) is identified by its name; its
definition comes with the lm-eval release the engine's lock pins, so a new
release is a new environment. Nothing here writes.

A local task file is data (tt_stagekit.taskfiles): a custom tag (`!function`
and any other), an `include:` outside its folder or `trust_remote_code` is
refused naming file and line, unless the user set TT_ALLOW_TASK_CODE=1 (which
lets `!function` through).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Optional

from tt_stagekit.taskfiles import TaskFileError, check_task_file as check_data, code_allowed

MAX_TASK_FOLDER_FILES = 256


def check_task_file(path: Path, spec_dir: Path) -> Path:
    """The task file, checked: a regular file, in a folder of its own, plain data (raises ValueError naming
    the problem, with file:line for what the file holds)."""
    if not path.is_file():
        raise ValueError(f"{path}: no such task file (a local lm-eval task is a .yaml file beside the spec)")
    if path.parent.resolve() == Path(spec_dir).resolve():
        raise ValueError(f"{path}: put the task file in a folder of its own (e.g. benchmarks/{path.stem}/"
                         f"{path.name}); every file beside it is hashed as the task's data")
    files = _folder_files(path.parent)
    if len(files) > MAX_TASK_FOLDER_FILES:
        raise ValueError(f"{path.parent}: {len(files)} files beside the task file (at most {MAX_TASK_FOLDER_FILES}); "
                         "keep only the task and its data there")
    try:
        check_data(path, code_allowed())
    except TaskFileError as exc:
        raise ValueError(str(exc)) from None
    return path


def task_code_note(spec) -> Optional[str]:
    """The line a run prints first when the user let task folders run code (TT_ALLOW_TASK_CODE=1) and the
    spec has local tasks; None otherwise."""
    benchmarks = spec.evaluation.benchmarks if spec.evaluation else None
    folders = sorted({str(Path(t.task).parent) for t in (benchmarks.tasks if benchmarks else [])
                      if t.task.endswith((".yaml", ".yml"))})
    if not folders or not code_allowed():
        return None
    return (f"TT_ALLOW_TASK_CODE=1: Python code in the benchmark task folder(s) {', '.join(folders)} may run in the "
            "baseline and candidate stages (`!function` tags); unset it to treat task files as data only")


def _folder_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))


def task_digest(task: str) -> str:
    """sha256 of a local task's folder (file names and contents), or of the name of a registered task."""
    digest = hashlib.sha256()
    if not task.endswith((".yaml", ".yml")):
        digest.update(b"name\0" + task.encode())
        return digest.hexdigest()
    path = Path(task)
    digest.update(b"file\0" + path.name.encode() + b"\0")
    for file in _folder_files(path.parent):
        digest.update(file.name.encode() + b"\0" + hashlib.sha256(file.read_bytes()).hexdigest().encode() + b"\0")
    return digest.hexdigest()
