"""`tt run --dry-run` and `tt pipeline plan` predict a baseline the cross-run cache holds (tt_host.runs.predict):
the stage shows as `reuse` naming the run it came from, and the run that follows does reuse it; another
instruction predicts a run. Host only: the echo test engine's opt-in baseline stage."""

from __future__ import annotations

from pathlib import Path

from conftest import echo_spec, write_spec


def _baseline(out: dict) -> dict:
    (stage,) = [s for s in out["stages"] if s["stage"] == "baseline"]
    return stage


def test_a_dry_run_predicts_the_baseline_the_cache_holds(tt, tmp_path):
    path = write_spec(tmp_path / "s", echo_spec(baseline=True))
    code, before = tt.json("run", path, "--dry-run")
    assert code == 0 and _baseline(before)["action"] == "run", before
    code, first = tt.json("run", path)
    assert code == 0, first
    for argv in (("run", path, "--dry-run"), ("pipeline", "plan", "--spec", path)):
        code, out = tt.json(*argv)
        assert code == 0, out
        predicted = _baseline(out)
        assert predicted["action"] == "reuse" and Path(first["run_dir"]).name in predicted["reason"], (argv, out)
    assert not list((tmp_path / "s" / ".tuned-tensor" / "runs").glob("*"))[1:], "a dry run created a run folder"
    code, second = tt.json("run", path)
    assert code == 0 and second["report"]["stages"]["baseline"]["this_run"].startswith("reused from run"), second
    spec = echo_spec(baseline=True)
    spec["system_prompt"] = "Answer with the capital city only."
    code, other = tt.json("run", write_spec(tmp_path / "s", spec), "--dry-run")
    assert code == 0 and _baseline(other)["action"] == "run", other
    spec = echo_spec(baseline=True)  # one more training example: the prepared rows change, the run evaluates again
    spec["examples"].append({"input": "Capital of country 99?", "output": "City 99"})
    write_spec(tmp_path / "s", spec)
    code, more = tt.json("run", path, "--dry-run")
    held = {row for row in tt.json("validate", path)[1]["held_out"]}
    if "Capital of country 99?" not in held:  # a trained-on example: same prompts, other training rows
        assert code == 0 and _baseline(more)["action"] == "run", more
