"""`tt sweep` on a real engine: the adapter on the session's tiny llama (tests/e2e/adapter_support.py), three
trials on a grid of learning rates, CPU. Every trial is a real LoRA training scored on the selection rows; the
held-out set is scored once, by the winner's run, which alone registers a model. (The echo-engine tests in
tests/host/sweeps/ show the resume, two workers and the refusals cheaply.) Cost: four short adapter runs,
about 2 to 4 minutes of CPU on 2 cores.
"""

from __future__ import annotations

import json
from pathlib import Path

from adapter_support import sentiment_examples, shared_tiny_model, tt, write_spec


def test_three_adapter_trials_on_a_tiny_base_choose_on_selection_rows_and_score_the_held_out_set_once(
        tmp_path_factory):
    with shared_tiny_model(tmp_path_factory) as model:
        home = tmp_path_factory.mktemp("adapter-sweep")
        sweep = {"trials": 3, "seed": 0, "sampler": "grid", "selection_fraction": 0.3,
                 "parameters": {"hyperparameters.learning_rate": {"choice": [0.0001, 0.006, 0.03]}}}
        spec = write_spec(home / "spec", str(model), sweep=sweep, examples=sentiment_examples()[:48],
                          hyperparameters={"n_epochs": 2, "max_eval_examples": 64})
        done = tt(home, "sweep", spec, "--json", timeout=1500)
        assert done.returncode == 0, done.stdout + done.stderr
        out = json.loads(done.stdout)
    trials = out["trials"]
    assert len(trials) == 3 and {t["state"] for t in trials} == {"complete"}
    assert sorted(t["params"]["hyperparameters.learning_rate"] for t in trials) == [0.0001, 0.006, 0.03], done.stderr
    scores = [t["selection_score"] for t in trials]
    assert len(set(scores)) == 3, scores  # the settings made a difference the selection rows saw
    final = Path(out["winner"]["run_dir"])
    held = set(json.loads((final / "run.json").read_text())["split"]["held_out"])
    for trial in trials:  # held-out predictions exist only for the winner's run
        run = Path(trial["run_dir"])
        split = json.loads((run / "run.json").read_text())["split"]
        assert not held & (set(split["held_out"]) | set(split["train"]))
        assert json.loads((run / "report.json").read_text())["models"] == []
    report = json.loads((final / "report.json").read_text())
    assert [m["id"] for m in report["models"]] == [out["winner"]["model_id"]]
    assert out["winner"]["held_out_score"] == report["metrics"]["candidate.grader_score"]
    assert out["optimism"] == max(scores) - out["winner"]["held_out_score"]
    print("adapter sweep:", scores, out["winner"]["held_out_score"], out["optimism"])
