"""A pipeline runs what `tt run` runs (docs/synthesis.md, docs/pipelines): over a spec with a `synthesis` block,
`tt pipeline run`'s `train` step runs the host's `synthesize` stage first (the plan lists it), so training gets
the teacher's rows; and a folder where a training stage finished without them (as an older `tt pipeline run`
left it) is never reused by `tt run --resume`: the stage that would train on less than its inputs name is
refused, naming it and `synthesize`, and nothing runs. Echo engine, a real HTTP teacher on loopback."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import echo_spec, write_spec
from teacher_stub import StubTeacher
from test_pipeline_documents import CANDIDATE, TRAIN, doc, run_pipeline, this_run

from tt_host.spec.split import normalize_prompt


def synth_spec(url: str, rows: int = 6) -> dict:
    spec = echo_spec(steps=2)
    spec["synthesis"] = {"teacher": {"base_url": url, "model": "stub-teacher"}, "rows": rows, "inputs_per_request": 4}
    return spec


def test_the_train_step_runs_synthesize_and_trains_on_its_rows(tt, tmp_path):
    with StubTeacher() as stub:
        write_spec(tmp_path, synth_spec(stub.url))
        (tmp_path / "tunedtensor.pipeline.json").write_text(json.dumps(doc(TRAIN, CANDIDATE)))
        code, plan = tt.json("pipeline", "plan", "-f", tmp_path / "tunedtensor.pipeline.json",
                             "--spec", tmp_path / "tunedtensor.json")
        assert code == 0, plan
        assert {s["id"]: s["stages"] for s in plan["steps"]} == {
            "train": ["synthesize", "prepare", "train"], "candidate": ["synthesize", "prepare", "train", "evaluate"]}
        assert not stub.requests  # planning asks the teacher nothing
        code, out = run_pipeline(tt, tmp_path, doc(TRAIN, CANDIDATE))
        assert code == 0, out
        assert stub.requests, "the teacher was never asked"
    assert this_run(out) == {"synthesize": "ran", "prepare": "ran", "train": "ran", "evaluate": "ran",
                             "baseline": "skipped"}
    run = Path(out["run_dir"])
    trained = json.loads((run / "train" / "request.json").read_text())["train_rows"]
    held_prompts = json.loads((run / "evaluate" / "request.json").read_text())["eval_prompts"]
    synthetic = [r for r in trained if r.get("source") == "synthetic"]
    assert len(synthetic) == 6 and len(trained) == 6 + 10 - len(held_prompts)  # the teacher's rows and the spec's
    held = {normalize_prompt(p["messages"][1]["content"]) for p in held_prompts}
    assert not {normalize_prompt(r["messages"][1]["content"]) for r in synthetic} & held


def test_a_folder_trained_without_its_synthetic_rows_is_never_reused(tt, tmp_path):
    """A run folder as an older `tt pipeline run` left it: `prepare` and `train` completed, `synthesize` never
    ran. `tt run --resume` would run `synthesize` now; `train`, whose inputs hold its fingerprint, is refused
    (not reused), naming both stages, before anything runs or the teacher is asked."""
    with StubTeacher() as stub:
        write_spec(tmp_path, synth_spec(stub.url))
        code, out = run_pipeline(tt, tmp_path, doc(TRAIN), "--resume", tmp_path / "run")
        assert code == 0, out
        run = tmp_path / "run"
        state = json.loads((run / "run.json").read_text())
        state["stages"]["synthesize"] = {"state": "pending"}  # what the older pipeline left
        (run / "run.json").write_text(json.dumps(state))
        for path in sorted((run / "synthesize").rglob("*"), reverse=True):
            path.rmdir() if path.is_dir() else path.unlink()
        (run / "synthesize").rmdir()
        asked = len(stub.requests)
        for command in (("run", tmp_path / "tunedtensor.json", "--resume", run),
                        ("pipeline", "run", "-f", tmp_path / "tunedtensor.pipeline.json",
                         "--spec", tmp_path / "tunedtensor.json", "--resume", run)):
            code, out = tt.json(*command)
            assert code == 2, out
            text = json.dumps(out)
            assert "stage 'train'" in text and "without the rows of stage 'synthesize'" in text, out
        assert len(stub.requests) == asked and not (run / "synthesize").exists()
        code, plan = tt.json("run", tmp_path / "tunedtensor.json", "--resume", run, "--dry-run")
        decisions = {d["stage"]: d["action"] for d in plan["stages"]}
        assert plan["ok"] is False and decisions["synthesize"] == "run" and decisions["prepare"] == "reuse"
        assert decisions["train"] == "refuse", plan
