"""The cross-run baseline cache (tt_host.evaluation.baseline_cache): a second run of an unchanged spec starts no
baseline stage process and its report says whose baseline it reused; a changed instruction evaluates again.

Host only: the echo test engine with its opt-in `baseline` stage (`echo.baseline`; the cache is host logic, the
engine's stage is only ever started or not)."""

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

    spec = echo_spec(baseline=True)
    spec["system_prompt"] = "Answer with the capital city only."  # other prompts: evaluated again
    code, out = tt.json("run", write_spec(tmp_path / "s", spec))
    assert code == 0, out
    third = Path(out["run_dir"])
    assert json.loads((third / "report.json").read_text())["stages"]["baseline"]["this_run"] == "ran"
    assert (third / "logs" / "baseline.log").is_file()
