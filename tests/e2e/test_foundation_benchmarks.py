"""lm-eval benchmarks in the gate for the foundation engine, end to end on CPU (docs/evaluation.md "Benchmarks").

A tiny from-scratch run whose SFT is damaged on purpose: every training example answers "banana". The spec's
`evaluation.benchmarks` names a local lm-eval task (YAML + JSONL in a folder of their own): "What is A plus B?"
with the choices A+B and "banana", gold the sum. The baseline is the pretrained model before SFT (it has read only
sums, so the digits are far likelier than "banana"), the candidate the SFT model; both are scored through their
Hugging Face export. The candidate falls far below the baseline, the gate fails and `tt models activate` refuses the
model naming the benchmark; raising only the task's `max_drop` re-runs nothing but the report, and activation then
succeeds. A named hub task missing from the datasets cache then fails the offline gate stage, naming the task and
`tt models prefetch-benchmarks`.
"""

from __future__ import annotations

import json

import pytest

from adapter_support import stage_starts
from foundation_support import report, tiny_spec, tt

TASK_YAML = """\
task: tt_sums
dataset_path: json
dataset_kwargs:
  data_files:
    test: sums.jsonl
test_split: test
output_type: multiple_choice
doc_to_text: "{{question}}"
doc_to_choice: choices
doc_to_target: label
target_delimiter: ""
metric_list:
  - metric: acc
"""
DOCUMENTS = 12


def _run(home, spec, run) -> dict:
    proc = tt(home, "run", spec, "--resume", run, "--json")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout)["report"]


@pytest.fixture(scope="module")
def damaged(tmp_path_factory) -> dict:
    home = tmp_path_factory.mktemp("foundation-benchmarks")
    spec = tiny_spec(home / "spec", pretrain_steps=40, finetune_steps=30, checkpoint_interval_steps=0)
    task_dir = spec.parent / "benchmarks" / "sums"
    task_dir.mkdir(parents=True)
    (task_dir / "task.yaml").write_text(TASK_YAML)
    (task_dir / "sums.jsonl").write_text("".join(
        json.dumps({"question": f"What is {i} plus {i + 2}?", "choices": [str(2 * i + 2), "banana"], "label": 0}) + "\n"
        for i in range(DOCUMENTS)))
    data = json.loads(spec.read_text())
    data["examples"] = [{"input": row["input"], "output": "banana"} for row in data["examples"]]
    data["evaluation"] = {"benchmarks": {"tasks": [{"task": "benchmarks/sums/task.yaml", "max_drop": 0.05}],
                                         "limit": DOCUMENTS}}
    spec.write_text(json.dumps(data))
    run = home / "run"
    return {"home": home, "spec": spec, "run": run, "report": _run(home, spec, run)}


def test_foundation_benchmarks_score_pretrained_and_sft_model_and_gate_activation(damaged, monkeypatch):
    home, spec, run, first = damaged["home"], damaged["spec"], damaged["run"], damaged["report"]
    section = first["benchmarks"]
    [task] = section["tasks"]
    print(f"foundation benchmarks: {task}")
    assert task["metric"] == "acc" and section["limit"] == DOCUMENTS, task
    # the pretrained model prefers the sum, the damaged SFT model "banana"
    assert task["baseline"] >= 0.75, f"the pretrained model no longer prefers the digits: {task}"
    assert task["candidate"] <= task["baseline"] - 0.5, task
    assert task["status"] == section["status"] == "failed" and "benchmarks/sums/task.yaml acc dropped" in \
        section["failures"][0]
    for stage in ("general_baseline", "chat_eval"):  # baseline: the pretrained model; candidate: the SFT model
        result = json.loads((run / stage / "result.json").read_text())
        assert set(result["benchmarks"]) == {task["task"]} and "acc" in result["benchmarks"][task["task"]], result
        assert result["metrics"][f"{stage}.benchmark_seconds"] > 0
        assert not list((run / stage).glob(".benchmark-export-*"))  # the temporary export is gone
    model_id = next(m["id"] for m in first["models"] if m["kind"] == "foundation-sft")
    refused = tt(home, "models", "activate", model_id)
    assert refused.returncode == 1 and "benchmark gate failed" in refused.stderr and "max_drop 0.05" in \
        refused.stderr, refused.stderr

    # only the policy changes: nothing runs again but the report, and the gate passes
    relaxed = json.loads(spec.read_text())
    relaxed["evaluation"]["benchmarks"]["tasks"][0]["max_drop"] = 1.0
    spec.write_text(json.dumps(relaxed))
    before = stage_starts(run)
    again = _run(home, spec, run)
    assert stage_starts(run) == before and report(run)["benchmarks"]["status"] == "passed"
    assert again["benchmarks"]["tasks"][0]["candidate"] == task["candidate"]
    activated = tt(home, "models", "activate", model_id, "--json")
    assert activated.returncode == 0 and json.loads(activated.stdout)["forced"] is False, activated.stderr

    # a named hub task whose dataset is not in the (empty) datasets cache: the offline gate stage fails naming the
    # task and the command that fetches it; the training stages are not run again
    relaxed["evaluation"]["benchmarks"]["tasks"].append({"task": "arc_easy"})
    spec.write_text(json.dumps(relaxed))
    monkeypatch.setenv("HF_HOME", str(home / "empty-hf-home"))
    failed = tt(home, "run", spec, "--resume", run)
    output = failed.stdout + failed.stderr
    assert failed.returncode == 1 and "benchmark task 'arc_easy'" in output, output[-3000:]
    assert "tt models prefetch-benchmarks" in output and "HF_HUB_OFFLINE=1" in output, output[-3000:]
    assert {name: at for name, at in stage_starts(run).items() if name in ("pretrain", "sft")} == {
        name: before[name] for name in ("pretrain", "sft")}
