"""`evaluation.benchmarks`: checked at `tt validate`, hashed outside the fingerprint chain, gated per task.

Host venv only: the adapter engine's plugin module (no torch) and `tt validate` in a subprocess. The run itself
(lm-eval on both models, activation refused) is tests/e2e/test_benchmark_gate.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import echo_spec, write_spec
from tt_engine_adapter.plugin import ENGINE
from tt_host.evaluation import benchmark_gate
from tt_host.runs.fingerprint import chain
from tt_host.runs.plan import decide
from tt_host.spec.compiler import compile_spec

REVISION = "0123456789abcdef0123456789abcdef01234567"
TRAINING = ("prepare", "prefetch", "train")


def task_folder(folder: Path, name: str = "reviews", data: str = '{"text": "a", "label": 0}\n') -> str:
    (folder / "benchmarks" / name).mkdir(parents=True, exist_ok=True)
    (folder / "benchmarks" / name / "task.yaml").write_text("task: t\n")
    (folder / "benchmarks" / name / "data.jsonl").write_text(data)
    return f"benchmarks/{name}/task.yaml"


def adapter_raw(benchmarks: dict) -> dict:
    return {"name": "b", "engine": "adapter", "base_model": "org/tiny", "base_model_revision": REVISION,
            "examples": [{"input": f"q{i}", "output": f"a{i}"} for i in range(4)],
            "evaluation": {"benchmarks": benchmarks}}


def plan(folder: Path, benchmarks: dict):
    spec = ENGINE.spec_model.model_validate(adapter_raw(benchmarks), context={"spec_dir": str(folder)})
    return spec, chain(ENGINE, spec, compile_spec(spec))


def test_benchmark_data_reaches_only_the_two_evaluations_and_the_policy_reaches_nothing(tmp_path):
    task = task_folder(tmp_path)
    _, base = plan(tmp_path, {"tasks": [{"task": task}], "limit": 8})
    prints = {p.stage.name: p.fingerprint for p in base}
    changes = {"limit": ({"tasks": [{"task": task}], "limit": 9}, None),
               "num_fewshot": ({"tasks": [{"task": task}], "limit": 8, "num_fewshot": 2}, None),
               "task data": ({"tasks": [{"task": task}], "limit": 8}, '{"text": "b", "label": 1}\n'),
               "named task": ({"tasks": [{"task": task}, {"task": "arc_easy"}], "limit": 8}, None)}
    for what, (block, data) in changes.items():
        if data is not None:
            task_folder(tmp_path, data=data)
        spec, other = plan(tmp_path, block)
        changed = {p.stage.name for p in other if p.fingerprint != prints[p.stage.name]}
        assert changed == {"baseline", "candidate"}, what
        state = {"stages": {p.stage.name: {"state": "completed", "fingerprint": p.fingerprint, "inputs": p.inputs}
                            for p in base}}
        decisions = {d.stage: d for d in decide(other, state, None, spec)}
        assert decisions["candidate"].action == "run" and decisions["candidate"].resume, what
        assert "benchmarks" in decisions["candidate"].reason, what
        task_folder(tmp_path)
    _, policy = plan(tmp_path, {"tasks": [{"task": task, "max_drop": 0.5, "metric": "acc_norm"}], "limit": 8})
    assert {p.stage.name: p.fingerprint for p in policy} == prints


def _bad(tmp_path: Path, benchmarks: dict):
    return write_spec(tmp_path / "s", adapter_raw(benchmarks))


CASES = {
    "missing task file": ({"tasks": [{"task": "nope/task.yaml"}]}, "evaluation.benchmarks.tasks.0.task",
                          "no such task file"),
    "task file beside the spec": ({"tasks": [{"task": "task.yaml"}]}, "evaluation.benchmarks.tasks.0.task",
                                  "in a folder of its own"),
    "listed twice": ({"tasks": [{"task": "arc_easy"}, {"task": "arc_easy"}]}, "evaluation.benchmarks.tasks",
                     "listed twice"),
    "no tasks": ({"tasks": []}, "evaluation.benchmarks.tasks", ""),
    "negative drop": ({"tasks": [{"task": "arc_easy", "max_drop": -0.1}]},
                      "evaluation.benchmarks.tasks.0.max_drop", ""),
    "zero limit": ({"tasks": [{"task": "arc_easy"}], "limit": 0}, "evaluation.benchmarks.limit", ""),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_benchmarks_block_exits_2_naming_the_field(tt, tmp_path, case):
    block, loc, detail = CASES[case]
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "task.yaml").write_text("task: t\n")
    code, out = tt.json("validate", _bad(tmp_path, block))
    assert code == 2, out
    locs = {e["loc"]: e["msg"] for e in out["errors"]}
    assert loc in locs and detail in locs[loc], out
    assert not (tmp_path / "s" / ".tuned-tensor").exists()


def test_engine_without_benchmark_stages_is_refused(tt, tmp_path):
    spec = echo_spec()
    spec["evaluation"] = {"benchmarks": {"tasks": [{"task": "arc_easy"}]}}
    code, out = tt.json("validate", write_spec(tmp_path, spec, "echo.json"))
    assert code == 2 and out["errors"][0]["loc"] == "evaluation.benchmarks", out
    assert "lm-eval" in out["errors"][0]["msg"]


def test_gate_per_task_metric_and_missing_sides(tmp_path):
    spec, _ = plan(tmp_path, {"tasks": [{"task": "arc_easy", "max_drop": 0.05},
                                        {"task": "hellaswag", "metric": "acc_norm", "max_drop": 0.0}]})
    policy = spec.evaluation.benchmarks
    scores = {"baseline": {"arc_easy": {"acc": 0.60, "acc_norm": 0.1}, "hellaswag": {"acc": 0.3, "acc_norm": 0.40}},
              "candidate": {"arc_easy": {"acc": 0.56, "acc_norm": 0.0}, "hellaswag": {"acc": 0.9, "acc_norm": 0.39}}}
    section = benchmark_gate.evaluate(policy, scores)
    rows = {row["task"]: row for row in section["tasks"]}
    assert rows["arc_easy"]["status"] == "passed" and rows["arc_easy"]["metric"] == "acc"  # first reported
    assert rows["hellaswag"]["status"] == "failed" and rows["hellaswag"]["metric"] == "acc_norm"
    assert section["status"] == "failed" and section["failures"] == [
        "hellaswag acc_norm dropped 0.0100 from 0.4000 to 0.3900, more than max_drop 0.0"]
    missing = benchmark_gate.evaluate(policy, {"baseline": scores["baseline"]})
    assert missing["status"] == "not run" and "candidate" in missing["reason"]
    unknown = benchmark_gate.evaluate(spec.evaluation.benchmarks.model_copy(update={"tasks": [
        policy.tasks[0].model_copy(update={"metric": "f1"})]}), scores)
    assert unknown["status"] == "not run" and "acc, acc_norm" in unknown["reason"]
    assert "| hellaswag | acc_norm | 0.4000 | 0.3900 | -0.0100 | 0.0 | failed |" in benchmark_gate.markdown(section)
    json.dumps(section)


def test_activation_names_the_configured_gate_that_did_not_run(tmp_path):
    from tt_host.models.activation import gate_of

    def gate(report) -> dict:
        (tmp_path / "report.json").write_text(json.dumps(report))
        return gate_of({"run_dir": str(tmp_path)})

    unrun = {"status": "not run", "reason": "no scores from the candidate evaluation", "failures": []}
    only_benchmarks = gate({"benchmarks": unrun})
    assert only_benchmarks["status"] == "not run"
    assert only_benchmarks["reason"] == "evaluation.benchmarks was not run (no scores from the candidate evaluation)"
    assert "general_regression" not in only_benchmarks["reason"]
    both = gate({"general_regression": {"status": "passed", "failures": []}, "benchmarks": unrun})
    assert both["reason"].startswith("evaluation.general_regression passed, but evaluation.benchmarks was not run")
    assert "neither evaluation.general_regression nor evaluation.benchmarks" in gate({"status": "completed"})["reason"]
    failed = gate({"benchmarks": {"status": "failed", "failures": ["t acc dropped 0.5"]}})
    assert failed["status"] == "failed" and failed["reason"] == "benchmark gate failed: t acc dropped 0.5"
    assert gate({"benchmarks": {"status": "passed", "failures": []}})["status"] == "passed"


def test_prefetch_benchmarks_skips_local_tasks_and_names_a_named_task_it_cannot_fetch(tt, tmp_path):
    local = task_folder(tmp_path)
    spec = write_spec(tmp_path, adapter_raw({"tasks": [{"task": local}]}), "local.json")
    code, out = tt.json("models", "prefetch-benchmarks", "--spec", spec)
    assert code == 0 and out["fetched"] == [] and out["local"] == [str(tmp_path / local)], out
    # offline, with an empty datasets cache: lm-eval in the engine's environment cannot load arc_easy's dataset
    spec = write_spec(tmp_path, adapter_raw({"tasks": [{"task": local}, {"task": "arc_easy"}]}), "named.json")
    tt.env.update(HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf"))
    code, out = tt.json("models", "prefetch-benchmarks", "--spec", spec, timeout=1800)
    assert code == 1 and "benchmark task 'arc_easy' could not be loaded" in out["error"]["message"], out
    assert "HF_HUB_OFFLINE" in out["error"]["message"]
