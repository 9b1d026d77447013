"""lm-evaluation-harness on a stage's model: the spec's `evaluation.benchmarks` (docs/evaluation.md).

Shared by the engines' gate stages (engine environment only: lm-eval,
transformers and torch are imported inside `run`, so importing this module,
and the request dataclasses below, needs the standard library alone). The
stage hands over a transformers model and tokenizer: the adapter engine the
model it already loaded (the base model for `baseline`, base + PEFT adapter
for `candidate`), the foundation engine its model loaded from its Hugging Face
export. lm-eval's `HFLM` wraps that model as it is, so both sides are scored
on exactly the model the other evaluations use. Every
prompt goes through the model's chat template with the spec's compiled
system message as the system turn (`apply_chat_template`, `system_instruction`),
which is how the tuned model is served; few-shot examples are turns of the
conversation (`fewshot_as_multiturn`) when there are any. An answer is scored
as tt trains and serves it: the rendered prompt's tokens, then the answer's
(lm-eval's default re-tokenizes the prompt's trailing whitespace with the
answer, which after a generation prompt ending in a newline is a sequence
the model never sees).

A local task file is data: it is checked again here (tt_stagekit.taskfiles:
no `!function` or other custom tag, no include outside its folder) before
lm-eval loads it, and lm-eval's prompt templates render in Jinja's immutable
sandbox, so a template cannot reach Python internals. `TT_ALLOW_TASK_CODE=1`,
set by the user, lifts both.
Each task runs on its own, from the folder of its task file for a local task
(so relative `data_files` in the YAML are read beside it), with a fixed seed.
A named task reads its dataset from the Hugging Face datasets cache (stages
run offline); when it is not there the stage fails saying how to fetch it
(tt_stagekit.benchmark_data).
lm-eval's console output goes to stderr: stdout carries the stage's events.
The result is `{task: {metric: value}}` with lm-eval's filter suffix
(`acc,none` → `acc`) removed; standard errors and the table's other entries
(`alias`, `sample_len`) are left out.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Optional

SEED = 1234


@dataclass(frozen=True)
class BenchmarkTask:
    extra_keys: ClassVar[str] = "ignore"  # metric and max_drop are the host's (the gate's policy)

    task: str


@dataclass(frozen=True)
class Benchmarks:
    """`evaluation.benchmarks` as a stage request carries it (tt_stagekit.stageconfig parses it)."""

    extra_keys: ClassVar[str] = "ignore"

    tasks: tuple[BenchmarkTask, ...]
    limit: Optional[int] = None
    num_fewshot: int = 0


@dataclass(frozen=True)
class Evaluation:
    """The request spec's `evaluation` block, as far as stages read it."""

    extra_keys: ClassVar[str] = "ignore"  # general_regression reaches the stages as general_prompts

    benchmarks: Optional[Benchmarks] = None


def go_offline() -> None:
    """No hub at run time: a named task's dataset comes from the Hugging Face datasets cache (call before
    importing transformers, datasets or lm_eval in the stage process)."""
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        os.environ[name] = "1"


def _scores(table: dict[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, value in table.items():
        metric, comma, _ = key.partition(",")  # "acc,none"; no filter ("alias", "sample_len"): not a score
        if not comma or metric.endswith("_stderr") or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        out.setdefault(metric, float(value))
    return out


def _sandbox_templates() -> None:
    """Render lm-eval's doc_to_text/doc_to_target templates in Jinja's immutable sandbox (a template from a
    task file is data: `{{ ''.__class__.__mro__ }}` and the like are refused, not run)."""
    import lm_eval.utils
    from jinja2 import BaseLoader, StrictUndefined
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    current = lm_eval.utils.env
    if isinstance(current, ImmutableSandboxedEnvironment):
        return
    sandbox = ImmutableSandboxedEnvironment(loader=BaseLoader, undefined=StrictUndefined, keep_trailing_newline=True)
    sandbox.filters.update(current.filters)
    lm_eval.utils.env = sandbox


def _checked_local_tasks(tasks: list[str]) -> None:
    """Refuse a local task file that would run code, unless the user opted in (tt_stagekit.taskfiles)."""
    from tt_stagekit.protocol import StageError
    from tt_stagekit.taskfiles import code_allowed, task_file_problem

    allowed = code_allowed()
    for name in tasks:
        if name.endswith((".yaml", ".yml")) and (problem := task_file_problem(Path(name), allowed)):
            raise StageError(problem)
    if not allowed:
        _sandbox_templates()


def _served_lm(model, tokenizer, batch_size: int, max_length: Optional[int]):
    """lm-eval's HFLM, scoring an answer after the prompt the way tt trains and serves it."""
    from lm_eval.models.huggingface import HFLM

    class ServedLM(HFLM):
        def _encode_pair(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
            # lm-eval moves the context's trailing whitespace into the continuation and re-tokenizes; after a chat
            # template's generation prompt ("...assistant<|end_header_id|>\n\n") that scores a token sequence the
            # model never sees (a tokenizer that merges "\n\n" splits it once "positive" follows). tt renders the
            # prompt, then appends the answer's tokens: score exactly that.
            return self.tok_encode(context), self.tok_encode(continuation, add_special_tokens=False)

    return ServedLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size, max_length=max_length)


def run(model, tokenizer, benchmarks: Benchmarks, system_message: str, batch_size: int,
        max_length: Optional[int], on_task: Callable[[int, int, str], None] = lambda done, total, task: None,
        ) -> dict[str, dict[str, float]]:
    """Score `model` on each task of the spec's `evaluation.benchmarks`: {task: {metric: value}}."""
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    tasks = [t.task for t in benchmarks.tasks]
    _checked_local_tasks(tasks)
    with contextlib.redirect_stdout(sys.stderr):
        lm = _served_lm(model, tokenizer, batch_size, max_length)
    named = [name for name in tasks if not name.endswith((".yaml", ".yml"))]
    manager = TaskManager(include_defaults=bool(named))
    fewshot = benchmarks.num_fewshot
    out: dict[str, dict[str, float]] = {}
    for index, name in enumerate(tasks):
        folder = Path(name).parent if name.endswith((".yaml", ".yml")) else Path(os.getcwd())
        on_task(index, len(tasks), name)
        try:
            with contextlib.chdir(folder), contextlib.redirect_stdout(sys.stderr):
                results = simple_evaluate(
                    model=lm, tasks=[name], task_manager=manager, num_fewshot=fewshot, limit=benchmarks.limit,
                    apply_chat_template=True, system_instruction=system_message or None,
                    fewshot_as_multiturn=fewshot > 0, log_samples=False, bootstrap_iters=0, random_seed=SEED,
                    numpy_random_seed=SEED, torch_random_seed=SEED, fewshot_random_seed=SEED)
        except ConnectionError as exc:  # datasets offline without the task's data in its cache
            if name not in named:
                raise
            from tt_stagekit.benchmark_data import offline_hint
            from tt_stagekit.protocol import StageError

            raise StageError(offline_hint(name, exc)) from None
        tables = (results or {}).get("results") or {}
        if len(tables) != 1:
            raise RuntimeError(f"lm-eval returned {len(tables)} result tables for task {name!r} "
                               f"({', '.join(tables) or 'none'}); a group of tasks is not supported, list its tasks")
        out[name] = _scores(next(iter(tables.values())))
    on_task(len(tasks), len(tasks), "")
    return out


def score(metrics: dict[str, Any], side: str, model, tokenizer, benchmarks: Benchmarks, system_message: str,
          batch_size: int, max_length: Optional[int]) -> dict[str, dict[str, float]]:
    """Run the benchmarks as one gate side's stage does: returns result.json `benchmarks` (docs/protocol.md,
    `StageResult.benchmarks`), records the `<side>.benchmark_seconds` metric in `metrics`, a progress event per task."""
    from tt_stagekit.protocol import progress

    started = time.perf_counter()
    scores = run(model, tokenizer, benchmarks, system_message, batch_size, max_length,
                 lambda done, count, task: progress(done, count, "benchmark task"))
    metrics[f"{side}.benchmark_seconds"] = round(time.perf_counter() - started, 3)
    return scores
