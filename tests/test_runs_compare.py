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
