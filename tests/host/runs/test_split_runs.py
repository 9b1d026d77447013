"""A run records its held-out split (prompt digests in run.json), a resumed run keeps it, and at the host→engine
boundary no training stage's request holds a row whose prompt an evaluating stage receives (echo test engine)."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import echo_spec, write_spec
from tt_host.spec.split import normalize_prompt, prompt_digest


def request(run: Path, stage: str) -> dict:
    return json.loads((run / stage / "request.json").read_text())


def user_prompts(rows: list) -> set[str]:
    return {normalize_prompt("\n".join(m["content"] for m in row["messages"] if m["role"] == "user")) for row in rows}


def test_training_requests_share_no_row_with_the_evaluation_prompts(tt, tmp_path):
    path = write_spec(tmp_path / "s", echo_spec())
    code, out = tt.json("run", path)
    assert code == 0, out
    run = Path(out["run_dir"])
    evaluated = user_prompts(request(run, "evaluate")["eval_prompts"])
    assert evaluated
    for stage in ("prepare", "train"):
        trained = user_prompts(request(run, stage)["train_rows"])
        assert trained and not trained & evaluated, (stage, sorted(trained & evaluated))
    assert len(evaluated) + len(user_prompts(request(run, "train")["train_rows"])) == 10
    state = json.loads((run / "run.json").read_text())
    assert set(state["split"]["held_out"]) == {prompt_digest(p) for p in evaluated}
    code, validated = tt.json("validate", path)
    assert {normalize_prompt(p) for p in validated["held_out"]} == evaluated


def test_a_resumed_run_keeps_the_split_it_started_with(tt, tmp_path):
    spec = echo_spec()
    path = write_spec(tmp_path / "s", spec)
    code, out = tt.json("run", path)
    assert code == 0, out
    run = Path(out["run_dir"])
    first = json.loads((run / "run.json").read_text())["split"]
    # a new name is a new salt: a new run would draw another split, the resumed one keeps its own (so its
    # rows are unchanged and every stage is reused; echo's prepare stage may not be replaced)
    spec["name"] = "capital-cities"
    write_spec(tmp_path / "s", spec)
    code, validated = tt.json("validate", path)
    assert {prompt_digest(p) for p in validated["held_out"]} != set(first["held_out"])
    code, out = tt.json("run", path, "--resume", run)
    assert code == 0, out
    again = json.loads((run / "run.json").read_text())["split"]
    assert again["salt"] == first["salt"] == "capitals"
    assert again == first
    report = json.loads((run / "report.json").read_text())
    assert {report["stages"][name]["this_run"] for name in ("prepare", "train", "evaluate")} == {"reused"}
    evaluated = {prompt_digest(p) for p in user_prompts(request(run, "evaluate")["eval_prompts"])}
    assert evaluated == set(again["held_out"])
