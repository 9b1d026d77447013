"""lm-eval benchmarks in the gate, end to end with the adapter engine on CPU (docs/evaluation.md "Benchmarks").

One adapter run (tiny llama) whose adapter is damaged on purpose: it is trained to answer "positive" to every
review. The spec's `evaluation.benchmarks` names a local lm-eval task (a YAML file and its JSONL data in a folder of
their own): a multiple-choice question over the same reviews whose gold answer is "negative", the choice the tiny
base model prefers (22 of the 24 documents: its random weights lean that way; the assertions say so when they
change). lm-evaluation-harness scores the base model and base + adapter (chat template, the spec's system message);
the tuned model falls far below the base model, so the gate fails and `tt models activate` refuses the model, naming
the benchmark. Raising only the task's `max_drop` re-runs nothing but the report, and the gate then passes.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Iterator

import pytest

from adapter_support import run_resumed, sentiment_examples, shared_tiny_model, stage_starts, tt, write_spec

TASK_YAML = """\
task: tt_review_sentiment
dataset_path: json
dataset_kwargs:
  data_files:
    test: reviews.jsonl
test_split: test
output_type: multiple_choice
doc_to_text: "{{text}}"
doc_to_choice: ["positive", "negative"]
doc_to_target: label
target_delimiter: ""
metric_list:
  - metric: acc
"""


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Iterator[Path]:
    with shared_tiny_model(tmp_path_factory) as model:
        yield model


@pytest.fixture(scope="module")
def damaged(tmp_path_factory, model) -> dict:
    home = tmp_path_factory.mktemp("benchmark-gate")
    folder = home / "spec"
    task_dir = folder / "benchmarks" / "reviews"
    task_dir.mkdir(parents=True)
    examples = sentiment_examples()
    (task_dir / "task.yaml").write_text(TASK_YAML)
    (task_dir / "reviews.jsonl").write_text("".join(
        json.dumps({"text": row["input"], "label": 1}) + "\n" for row in examples))
    damaging = [{"input": row["input"], "output": "positive"} for row in examples]
    benchmarks = {"tasks": [{"task": "benchmarks/reviews/task.yaml", "max_drop": 0.05}], "limit": 24}
    spec = write_spec(folder, str(model), examples=damaging, evaluation={"benchmarks": benchmarks},
                      hyperparameters={"n_epochs": 6, "learning_rate": 0.01, "max_eval_examples": 4})
    run = home / "run"
    started = time.monotonic()
    report = run_resumed(home, spec, run)
    print(f"benchmark gate fixture: {time.monotonic() - started:.0f}s")
    return {"home": home, "spec": spec, "run": run, "report": report}


def test_lm_eval_scores_both_models_a_damaged_adapter_fails_the_gate_and_a_policy_change_rewrites_the_report(
        damaged):
    home, spec, run, report = damaged["home"], damaged["spec"], damaged["run"], damaged["report"]
    section = report["benchmarks"]
    assert section["limit"] == 24 and section["num_fewshot"] == 0
    [task] = section["tasks"]
    assert task["metric"] == "acc" and task["status"] == "failed", task
    # lm-eval scored both sides: the base model picks "negative" (the gold answer) nearly always, the damaged
    # adapter "positive"
    assert task["baseline"] >= 0.75, f"the tiny base model no longer prefers 'negative': {task}"
    assert task["candidate"] <= task["baseline"] - 0.5, task
    assert report["status"] == "completed" and section["status"] == "failed"
    assert "benchmarks/reviews/task.yaml acc dropped" in section["failures"][0]
    for side in ("baseline", "candidate"):
        result = json.loads((run / side / "result.json").read_text())
        assert set(result["benchmarks"]) == {task["task"]} and "acc" in result["benchmarks"][task["task"]]
    markdown = (run / "report.md").read_text()
    assert "## Benchmarks (lm-evaluation-harness)" in markdown and "| failed |" in markdown

    model_id = next(m["id"] for m in report["models"] if m["kind"] == "adapter")
    refused = tt(home, "models", "activate", model_id)
    assert refused.returncode == 1 and "benchmark" in refused.stderr and "max_drop 0.05" in refused.stderr, \
        refused.stderr
    assert json.loads(tt(home, "models", "active", "--json").stdout)["model"] is None

    # only the policy changes: nothing runs again but the report, and the gate passes
    relaxed = json.loads(spec.read_text())
    relaxed["evaluation"]["benchmarks"]["tasks"][0]["max_drop"] = 1.0
    spec.write_text(json.dumps(relaxed))
    before = stage_starts(run)
    again = run_resumed(home, spec, run)
    assert stage_starts(run) == before
    assert again["benchmarks"]["status"] == "passed" and again["benchmarks"]["tasks"][0]["max_drop"] == 1.0
    assert again["benchmarks"]["tasks"][0]["candidate"] == task["candidate"]
    activated = tt(home, "models", "activate", model_id, "--json")
    assert activated.returncode == 0 and json.loads(activated.stdout)["forced"] is False, activated.stderr
