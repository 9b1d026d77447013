"""lm-evaluation-harness on the stage's model: the spec's `evaluation.benchmarks` (docs/evaluation.md).

The model the stage already loaded (the base model for `baseline`, base +
PEFT adapter for `candidate`) is wrapped in lm-eval's `HFLM` as it is, so
both sides are scored on exactly the model the other evaluations use. Every
prompt goes through the model's chat template with the spec's compiled
system message as the system turn (`apply_chat_template`, `system_instruction`),
which is how the tuned model is served; few-shot examples are turns of the
conversation (`fewshot_as_multiturn`) when there are any.

Each task runs on its own, from the folder of its task file for a local task
(so relative `data_files` in the YAML are read beside it), with a fixed seed.
lm-eval's console output goes to stderr: stdout carries the stage's events.
The result is `{task: {metric: value}}` with lm-eval's filter suffix
(`acc,none` → `acc`) removed and standard errors left out.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Any, Callable, Optional

from tt_engine_adapter.runtime.config import Benchmarks

SEED = 1234


def _scores(table: dict[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, value in table.items():
        metric, _, _ = key.partition(",")
        if metric.endswith("_stderr") or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        out.setdefault(metric, float(value))
    return out


def run(model, tokenizer, benchmarks: Benchmarks, system_message: str, batch_size: int,
        max_length: Optional[int], on_task: Callable[[int, int, str], None] = lambda done, total, task: None,
        ) -> dict[str, dict[str, float]]:
    """Score `model` on each task of the spec's `evaluation.benchmarks`: {task: {metric: value}}."""
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    with contextlib.redirect_stdout(sys.stderr):
        lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size, max_length=max_length)
    tasks = [t.task for t in benchmarks.tasks]
    named = [name for name in tasks if not name.endswith((".yaml", ".yml"))]
    manager = TaskManager(include_defaults=bool(named))
    fewshot = benchmarks.num_fewshot
    out: dict[str, dict[str, float]] = {}
    for index, name in enumerate(tasks):
        folder = Path(name).parent if name.endswith((".yaml", ".yml")) else Path(os.getcwd())
        on_task(index, len(tasks), name)
        with contextlib.chdir(folder), contextlib.redirect_stdout(sys.stderr):
            results = simple_evaluate(
                model=lm, tasks=[name], task_manager=manager, num_fewshot=fewshot, limit=benchmarks.limit,
                apply_chat_template=True, system_instruction=system_message or None,
                fewshot_as_multiturn=fewshot > 0, log_samples=False, bootstrap_iters=0, random_seed=SEED,
                numpy_random_seed=SEED, torch_random_seed=SEED, fewshot_random_seed=SEED)
        tables = (results or {}).get("results") or {}
        if len(tables) != 1:
            raise RuntimeError(f"lm-eval returned {len(tables)} result tables for task {name!r} "
                               f"({', '.join(tables) or 'none'}); a group of tasks is not supported, list its tasks")
        out[name] = _scores(next(iter(tables.values())))
    on_task(len(tasks), len(tasks), "")
    return out
