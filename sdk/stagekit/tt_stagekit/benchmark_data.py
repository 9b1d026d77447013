"""Named lm-eval tasks' datasets into the Hugging Face datasets cache, for stages that run offline.

    python -P -m tt_stagekit.benchmark_data TASK [TASK ...]

Run in an engine environment by `tt models prefetch-benchmarks` (tt_host.models.basemodel), online: lm-eval
loads each task, which downloads its dataset into the cache (HF_HOME / HF_DATASETS_CACHE), where the gate
stages, offline (HF_HUB_OFFLINE=1), find it. Prints one JSON line `{"tasks": [...]}`; a task that cannot be
loaded exits 1 naming it. `offline_hint` is the message a stage gives when a named task's dataset is missing.
"""

from __future__ import annotations

import contextlib
import json
import sys

COMMAND = "tt models prefetch-benchmarks --spec SPEC"


def offline_hint(task: str, error: BaseException) -> str:
    """Why a named task did not load in an offline stage, and what to run."""
    return (f"benchmark task {task!r}: its dataset is not in the Hugging Face datasets cache, and stages run offline "
            f"(HF_HUB_OFFLINE=1) ({type(error).__name__}: {error}); download it once with the machine online: "
            f"`{COMMAND}` (same HF_HOME), or give the task as a local task file (docs/evaluation.md \"Benchmarks\")")


def fetch(tasks: list[str]) -> list[str]:
    """Load each named task with lm-eval (downloading its dataset when online); the tasks loaded."""
    from lm_eval.tasks import TaskManager

    manager = TaskManager()
    for task in tasks:
        try:
            with contextlib.redirect_stdout(sys.stderr):
                manager.load([task])
        except Exception as exc:  # lm-eval and datasets raise many kinds; name the task and the cause
            raise SystemExit(f"benchmark task {task!r} could not be loaded ({type(exc).__name__}: {exc}); check "
                             "the name (lm-eval's task list), the network, or HF_HUB_OFFLINE and the cache it reads")
    return tasks


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: python -P -m tt_stagekit.benchmark_data TASK [TASK ...]")
    print(json.dumps({"tasks": fetch(sys.argv[1:])}))
