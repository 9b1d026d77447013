"""The cross-run baseline cache (tt_host.evaluation.baseline_cache): a second run of an unchanged spec starts no
baseline stage process and its report says whose baseline it reused; a changed instruction evaluates again.

Host only: the echo test engine with its opt-in `baseline` stage (`echo.baseline`; the cache is host logic, the
engine's stage is only ever started or not). What the key holds (the held-out prompts, the base model's revision and
the commit it resolved to) is checked on the key the host computes for the adapter's real baseline stage, in process:
the echo baseline runs last, after stages whose results already differ whenever its prompts do."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import echo_spec, write_spec


def test_a_second_unchanged_run_reuses_the_baseline_without_starting_it(tt, tmp_path):
    path = write_spec(tmp_path / "s", echo_spec(baseline=True))
    runs = []
    for _ in range(2):
        code, out = tt.json("run", path)
        assert code == 0, out
        runs.append(Path(out["run_dir"]))
    first, second = (json.loads((run / "report.json").read_text()) for run in runs)
    assert first["stages"]["baseline"]["this_run"] == "ran" and (runs[0] / "logs" / "baseline.log").is_file()
    assert second["stages"]["baseline"]["this_run"] == f"reused from run {runs[0].name}"
    assert not (runs[1] / "logs" / "baseline.log").exists()  # no stage process: it would have logged
    assert any(f"baseline reused from run {runs[0].name}" in note for note in second["notes"])
    assert {k: v for k, v in second["metrics"].items() if k.startswith("baseline.")} == \
        {k: v for k, v in first["metrics"].items() if k.startswith("baseline.")}
    assert first["metrics"]["baseline.count"] > 0
    assert second["stages"]["train"]["this_run"] == "ran"  # only the baseline comes from the cache
    shown = tt("run", path)  # a person's terminal: the stage named once, not "baseline: baseline reused"
    assert shown.returncode == 0 and f"baseline: reused from run {runs[0].name}" in shown.stderr, shown.stderr
    assert "baseline: baseline" not in shown.stderr, shown.stderr

    spec = echo_spec(baseline=True)
    spec["system_prompt"] = "Answer with the capital city only."  # other prompts: evaluated again
    code, out = tt.json("run", write_spec(tmp_path / "s", spec))
    assert code == 0, out
    third = Path(out["run_dir"])
    assert json.loads((third / "report.json").read_text())["stages"]["baseline"]["this_run"] == "ran"
    assert (third / "logs" / "baseline.log").is_file()


EXAMPLES = [{"input": f"Capital of country {i}?", "output": f"City {i}"} for i in range(10)]


def _adapter_baseline_key(tmp_path: Path, revision: str = "v1", resolved_commit: str = "a" * 40,
                          examples: list = EXAMPLES) -> str:
    """The baseline cache key tt computes for an adapter baseline stage on a hub base model at `revision`, whose
    prefetch stage resolved it to `resolved_commit`: the real spec, stages, inputs and request, no stage run.
    Every call uses the same run folder and earlier results, as a second run that finds the first's entry would."""
    from tt_host.engines.envs import EnvInfo
    from tt_host.evaluation.baseline_cache import cache_key
    from tt_host.plugins import load_plugins
    from tt_host.runs.fingerprint import chain
    from tt_host.runs.invoke import RunCall, StageCall, stage_request
    from tt_host.runs.progress import QuietReporter
    from tt_host.runs.store import RunDir
    from tt_host.spec.loading import load_spec

    spec = {"name": "t", "engine": "adapter", "base_model": "org/tiny-model", "base_model_revision": revision,
            "system_prompt": "Answer with the capital city.",
            "examples": examples}
    path = write_spec(tmp_path / "spec", spec)
    loaded = load_spec(path, load_plugins())
    assert loaded.valid, loaded.errors
    run_dir = tmp_path / "run"
    call = RunCall(loaded, load_plugins(), RunDir(run_dir), None, QuietReporter(), "d" * 64, False)
    env = EnvInfo("adapter", "envkey", tmp_path / "env", tmp_path / "env" / "bin" / "python", False, 0.0)
    prefetch = {"dir": str(run_dir / "prefetch"),
                "result": {"status": "completed", "outputs": {"base_model": {
                    "name": "org/tiny-model",
                    "path": f"/hub/models--org--tiny-model/snapshots/{resolved_commit}"}}}}
    prepare = {"dir": str(run_dir / "prepare"), "result": {"status": "completed", "outputs": {"rows": "rows.jsonl"}}}
    (stage, inputs, fingerprint), = [planned for planned in chain(loaded.engine, loaded.spec, loaded.compiled)
                                     if planned[0].name == "baseline"]
    stage_call = StageCall(call, env, stage, fingerprint, False, {"prepare": prepare, "prefetch": prefetch}, None)
    request = stage_request(stage_call, run_dir / "baseline", run_dir / "baseline" / "result.json").to_json()
    return cache_key(loaded.engine, env.key, stage, loaded.spec, inputs, request, run_dir)


def test_the_base_models_revision_and_resolved_commit_are_in_the_key(tmp_path):
    """Another `base_model_revision` (same resolved commit) or another resolved commit (same revision) is another key;
    the same of both is the same key."""
    key = _adapter_baseline_key(tmp_path)
    assert _adapter_baseline_key(tmp_path) == key
    assert _adapter_baseline_key(tmp_path, revision="v2") != key, "the key ignores base_model_revision"
    assert _adapter_baseline_key(tmp_path, resolved_commit="b" * 40) != key, "the key ignores the commit prefetch resolved"


def test_other_held_out_prompts_are_another_key(tmp_path):
    """One held-out example's prompt replaced by another the split also holds out: the same system message, training
    rows and earlier results, other held-out prompts, so another key. A key without the held-out rows would report the
    first run's baseline, made on other prompts, as reused, and base and tuned would be compared on different prompts."""
    from tt_host.spec.split import is_held_out

    held = [e["input"] for e in EXAMPLES if is_held_out("t", e["input"])]
    new = next(p for p in (f"Capital of land {i}?" for i in range(1000)) if is_held_out("t", p))
    assert held, "the spec must hold some example out for this test to mean anything"
    other = [{**e, "input": new} if e["input"] == held[0] else e for e in EXAMPLES]
    assert _adapter_baseline_key(tmp_path, examples=other) != _adapter_baseline_key(tmp_path), \
        "the key ignores the held-out prompts"
