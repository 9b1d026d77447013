"""`tt runs compare A B` compares on the held-out prompts both runs evaluated, counts what is shared and not, and
warns about each prompt one run trained on while the other held it out (echo test engine)."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import echo_spec, write_spec
from tt_host.spec.split import split_examples


def run(tt, folder: Path, spec: dict) -> Path:
    code, out = tt.json("run", write_spec(folder, spec))
    assert code == 0, out
    return Path(out["run_dir"])


def held(spec: dict, salt: str) -> set[str]:
    inputs = [e["input"] for e in spec["examples"]]
    return {text for text, flag in zip(inputs, split_examples(inputs, salt)) if flag}


def test_compare_reports_shared_prompts_their_metrics_and_a_leak_warning(tt, tmp_path):
    before = echo_spec()
    after = echo_spec()
    after["examples"] += [{"input": f"Capital of land {i}?", "output": f"Town {i}"} for i in range(10)]
    first, second = run(tt, tmp_path / "a", before), run(tt, tmp_path / "b", after)
    shared = held(before, "capitals")
    assert shared and shared < held(after, "capitals")  # adding examples moved none of the earlier ones
    code, data = tt.json("runs", "compare", first, second)
    assert code == 0, data
    part = data["held_out"]
    assert (part["shared"], part["only_first"], part["only_second"]) == (
        len(shared), 0, len(held(after, "capitals") - shared))
    assert part["metrics"]["candidate.count"] == [len(shared), len(shared)]
    assert part["metrics"]["candidate.exact_match"] == [0.0, 0.0]  # echo answers unseen prompts with the prompt
    assert data["metrics"]["candidate.count"] == [len(shared), len(held(after, "capitals"))]  # the reports' own
    # the graders of the first run's spec score both sides (one yardstick): on the first run's own held-out
    # prompts (all shared) its score is the one its report gave
    assert part["graders_from"] == first.name
    assert part["metrics"]["candidate.grader_score"][0] == data["metrics"]["candidate.grader_score"][0]
    assert part["metrics"]["candidate.graders.token_f1"][1] is not None
    assert data["warnings"] == []

    # a run made with the old rule (no recorded split) compares the same: the requests say what was evaluated
    state = json.loads((first / "run.json").read_text())
    del state["split"]
    (first / "run.json").write_text(json.dumps(state))
    assert tt.json("runs", "compare", first, second)[1] == data

    # another salt holds out other prompts: the run trained on some of `first`'s held-out ones
    salted = {**echo_spec(), "evaluation": {"split_salt": "other"}}
    third = run(tt, tmp_path / "c", salted)
    leaked = shared - held(salted, "other")
    assert leaked
    code, data = tt.json("runs", "compare", first, third)
    named = {(w["prompt"], w["evaluated_in"], w["trained_in"]) for w in data["warnings"] if w["as"] == "held out"}
    ids = (first.name, third.name)
    assert named == {(p, ids[0], ids[1]) for p in leaked} | {(p, ids[1], ids[0]) for p in held(salted, "other") - shared}
    human = tt("runs", "compare", first, third)
    assert human.returncode == 0 and all(repr(p) in human.stderr for p in leaked), human.stderr
    assert "held-out prompts:" in human.stdout and "shared" in human.stdout


def test_runs_with_different_graders_are_compared_with_the_first_runs_on_both_sides(tt, tmp_path):
    """The first run's `exact` grader scores the echoed answers 0, the second's `number` grader 1 (the echoed
    prompt holds the city's number): each order of `tt runs compare` scores both sides with its first run's
    graders, and names that run."""
    exact, number = echo_spec(), echo_spec()
    exact["evaluation"] = {"graders": [{"kind": "exact"}]}
    number["evaluation"] = {"graders": [{"kind": "number"}]}
    first, second = run(tt, tmp_path / "a", exact), run(tt, tmp_path / "b", number)
    for (one, other), score, own in (((first, second), 0.0, "exact"), ((second, first), 1.0, "number")):
        code, data = tt.json("runs", "compare", one, other)
        assert code == 0, data
        part = data["held_out"]
        assert part["graders_from"] == one.name and part["shared"] == len(held(exact, "capitals")), part
        assert part["metrics"]["candidate.grader_score"] == [score, score], part["metrics"]
        graded = {key for key in part["metrics"] if key.startswith("candidate.graders.")}
        assert graded == {f"candidate.graders.{own}"}, graded


def _constructed_run(folder: Path, general_rows: list[tuple[str, str]], answers: dict[str, str],
                     trained: list[str]) -> Path:
    """A finished run as the host leaves it on disk: run.json, spec.json with a general set, a training request
    and an evaluating stage that answered the general prompts."""
    folder.mkdir(parents=True)
    (folder / "general.jsonl").write_text("".join(json.dumps({"messages": [
        {"role": "user", "content": q}, {"role": "assistant", "content": a}]}) + "\n" for q, a in general_rows))
    (folder / "spec.json").write_text(json.dumps({"name": "g", "examples": [], "evaluation": {
        "general_regression": {"dataset": str(folder / "general.jsonl")}}}))
    (folder / "run.json").write_text(json.dumps({"format": 1, "id": folder.name, "engine": "not-installed",
                                                 "status": "completed", "stages": {
                                                     "train": {"state": "completed"},
                                                     "candidate": {"state": "completed"}}}))
    for stage in ("train", "candidate"):
        (folder / stage).mkdir()
    (folder / "train" / "request.json").write_text(json.dumps({"train_rows": [
        {"id": f"t{i}", "messages": [{"role": "user", "content": q}, {"role": "assistant", "content": "x"}]}
        for i, q in enumerate(trained)]}))
    ids = {q: f"general-{i:06d}" for i, (q, _) in enumerate(general_rows)}
    (folder / "candidate" / "request.json").write_text(json.dumps({"general_prompts": [
        {"id": ids[q], "messages": [{"role": "user", "content": q}]} for q, _ in general_rows]}))
    (folder / "candidate" / "general.jsonl").write_text("".join(
        json.dumps({"id": ids[q], "prediction": p}) + "\n" for q, p in answers.items()))
    (folder / "candidate" / "result.json").write_text(json.dumps({"status": "completed",
                                                                 "general_predictions": "general.jsonl"}))
    return folder


def test_the_general_set_gets_the_same_treatment(tmp_path):
    from tt_host.runs.compare import compare_prompts

    rows = [("What is 2+2?", "4"), ("Capital of France?", "Paris"), ("Colour of the sky?", "blue")]
    a = _constructed_run(tmp_path / "a", rows, {"What is 2+2?": "4", "Capital of France?": "Lyon",
                                                "Colour of the sky?": "blue"}, trained=["Say hi"])
    b = _constructed_run(tmp_path / "b", rows[:2] + [("Largest ocean?", "Pacific")],
                         {"What is 2+2?": "4", "Capital of France?": "Paris", "Largest ocean?": "Pacific"},
                         trained=["  what is 2+2? "])
    data = compare_prompts(a, b, ("a", "b"))
    part = data["general"]
    assert (part["shared"], part["only_first"], part["only_second"]) == (2, 1, 1)
    assert part["metrics"]["candidate.general.count"] == [2, 2]
    assert part["metrics"]["candidate.general.exact_match"] == [0.5, 1.0]  # on the two shared prompts only
    assert [(w["prompt"], w["as"], w["evaluated_in"], w["trained_in"]) for w in data["warnings"]] == [
        ("What is 2+2?", "general-regression", "a", "b")]
