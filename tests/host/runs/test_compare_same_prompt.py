"""`tt runs compare` matches prompts by the one key (docs/evaluation.md "The same prompt"): a run whose examples
are the other run's with a zero-width space inside each prompt shares those prompts, and a prompt one run held
out while the other trained on its twin is named in a leak warning (echo test engine)."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import echo_spec, write_spec
from tt_host.spec.split import normalize_prompt, split_examples


def run(tt, folder: Path, spec: dict) -> Path:
    code, out = tt.json("run", write_spec(folder, spec))
    assert code == 0, out
    return Path(out["run_dir"])


def sides(spec: dict) -> tuple[set[str], set[str]]:
    """(keys held out, keys trained on)."""
    inputs = [e["input"] for e in spec["examples"]]
    flags = split_examples(inputs, spec["name"])
    return ({normalize_prompt(p) for p, f in zip(inputs, flags) if f},
            {normalize_prompt(p) for p, f in zip(inputs, flags) if not f})


def test_twin_prompts_of_two_runs_are_one_prompt_to_compare(tt, tmp_path):
    plain = echo_spec()
    hidden = echo_spec()
    hidden["examples"] = [{**e, "input": e["input"].replace(" ", " \u200b", 1)} for e in hidden["examples"]]
    (held_a, trained_a), (held_b, trained_b) = sides(plain), sides(hidden)
    shared, leaked = held_a & held_b, (held_a & trained_b) | (held_b & trained_a)
    assert shared and leaked, "the texts were chosen so that both happen"
    first, second = run(tt, tmp_path / "a", plain), run(tt, tmp_path / "b", hidden)
    code, data = tt.json("runs", "compare", first, second)
    assert code == 0, data
    assert data["held_out"]["shared"] == len(shared), data["held_out"]
    warned = {normalize_prompt(w["prompt"]) for w in data["warnings"] if w["as"] == "held out"}
    assert warned == leaked, json.dumps(data["warnings"], ensure_ascii=False)
