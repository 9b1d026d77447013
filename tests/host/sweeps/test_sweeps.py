"""`tt sweep` on the echo test engine (tests/engines/echo): real `tt` processes, real stage processes, a real
Optuna study in SQLite. The echo engine memorizes its training rows and echoes a prompt it never saw, so every
setting scores the same on unseen prompts: the planted case of "every trial equally good".

What each test shows (docs/promises.md, sweeps): the trials are scored on selection rows carved from the
training examples and the held-out set is scored once, for the winner, whose model alone is registered; a
killed sweep resumes without running a completed trial again; two workers on one study run N trials in all;
a bad block exits 2 naming the field and creates nothing; `tt run` ignores the block with one line.
"""

from __future__ import annotations

import json
import shutil
import signal
import time
from pathlib import Path

import optuna

from conftest import echo_spec, write_spec
from process_support import wait_until
from tt_host.spec.split import normalize_prompt, prompt_digest

SWEEP = {"trials": 3, "seed": 0, "selection_fraction": 0.3,
         "parameters": {"echo.learning_rate": {"log_uniform": [1e-3, 1e-1]}, "echo.steps": {"int": [1, 4]}}}


def sweep_spec(folder: Path, sweep=SWEEP, **echo) -> Path:
    """20 examples; every third one's answer is its own prompt, which the echo engine gets right unseen: the
    planted case, every setting equally good, with scores that differ between the selection and held-out rows."""
    spec = echo_spec(**echo)
    spec["examples"] = [{"input": f"Capital of country {i}?", "output": f"Capital of country {i}?" if i % 3 == 0
                         else f"City {i}"} for i in range(20)]
    spec["sweep"] = sweep
    return write_spec(folder, spec)


def split_of(run: Path) -> dict:
    return json.loads((run / "run.json").read_text())["split"]


def prompts(spec: Path) -> dict[str, str]:
    """digest -> prompt, for every example of the spec."""
    return {prompt_digest(e["input"]): e["input"] for e in json.loads(spec.read_text())["examples"]}


def evaluated(run: Path) -> set[str]:
    """The prompts the run's evaluate stage answered (its request: prompts only, never answers)."""
    request = json.loads((run / "evaluate" / "request.json").read_text())
    return {row["messages"][1]["content"] for row in request["eval_prompts"]}


def test_trials_score_selection_rows_and_only_the_winner_sees_the_held_out_set(tt, tmp_path):
    spec = sweep_spec(tmp_path / "p")
    code, out = tt.json("sweep", spec)
    assert code == 0, out
    trials = out["trials"]
    assert set(out) == {"ok", "trials", "winner", "optimism"} and out["ok"] is True  # docs/json.md
    assert all(set(t) == {"number", "params", "selection_score", "run_dir", "state"} for t in trials)
    assert set(out["winner"]) == {"number", "params", "run_dir", "model_id", "held_out_score"}
    assert [t["number"] for t in trials] == [0, 1, 2] and {t["state"] for t in trials} == {"complete"}
    assert len({json.dumps(t["params"], sort_keys=True) for t in trials}) == 3  # distinct settings
    assert all(isinstance(t["selection_score"], float) for t in trials)
    winner = out["winner"]
    final = Path(winner["run_dir"])
    by_digest = prompts(spec)
    held_out = {by_digest[d] for d in split_of(final)["held_out"]}
    assert held_out and evaluated(final) == held_out  # the winner's run: scored on the held-out set
    held_keys = {normalize_prompt(p) for p in held_out}
    selection = None
    for trial in trials:
        run = Path(trial["run_dir"])
        rows = evaluated(run)
        selection = selection or rows
        assert rows == selection and rows  # every trial scored on the same selection rows
        assert not {normalize_prompt(p) for p in rows} & held_keys  # never a held-out example or its twin
        trained = {by_digest[d] for d in split_of(run)["train"]}
        assert not trained & held_out and not trained & rows
        for path in run.rglob("*"):  # no file of a trial holds a held-out prompt
            if path.is_file() and path.suffix in (".json", ".jsonl", ".md", ".html"):
                text = path.read_text(errors="replace")
                assert not [p for p in held_out if p in text], path
        report = json.loads((run / "report.json").read_text())
        assert report["models"] == [] and report["metrics"]["candidate.count"] == len(selection)
    assert len({t["selection_score"] for t in trials}) == 1  # planted: every trial equally good
    best = max(trials, key=lambda t: (t["selection_score"], -t["number"]))
    assert winner["number"] == best["number"] and winner["params"] == best["params"]
    assert out["optimism"] == best["selection_score"] - winner["held_out_score"]
    models = tt.json("models", "list")[1]
    assert [m["id"] for m in models["models"]] == [winner["model_id"]]  # the winner alone is registered
    sweep_dir = final.parent
    report = (sweep_dir / "report.md").read_text()
    assert f"({len(selection)} prompts)" in report and f"({len(held_out)} prompts)" in report
    assert "optimism (selection minus held-out)" in report
    assert {p.name for p in sweep_dir.glob("score-*.svg")} == {"score-echo-learning_rate.svg", "score-echo-steps.svg"}
    assert "<svg" in (sweep_dir / "report.html").read_text()


def test_a_killed_sweep_resumes_without_running_a_completed_trial_again(tt, tmp_path):
    spec = sweep_spec(tmp_path / "p", steps=6, step_seconds=0.5)
    sweep = tt.popen("sweep", spec)
    trials = spec.parent / ".tuned-tensor" / "sweeps"
    wait_until(lambda: list(trials.glob("*/trials/0001/train/state.json")), "the second trial training", 120)
    sweep.send_signal(signal.SIGKILL)
    sweep.communicate(timeout=60)
    first = next(trials.glob("*/trials/0000"))
    before = (first / "run.json").read_text()
    code, out = tt.json("sweep", spec)
    assert code == 0, out
    assert (first / "run.json").read_text() == before  # the completed trial was not run again
    assert [t["state"] for t in out["trials"]] == ["complete"] * 3 and len(out["trials"]) == 3
    assert Path(out["trials"][0]["run_dir"]) == first  # the same study, continued
    dirs = [Path(t["run_dir"]).name for t in out["trials"]]
    assert dirs[:2] == ["0000", "0001"] and len(set(dirs)) == 3  # the killed trial resumed in its own folder
    study = optuna.load_study(study_name=first.parent.parent.name,
                              storage=f"sqlite:///{first.parent.parent / 'study.db'}")
    assert [t.state.name for t in study.trials].count("COMPLETE") == 3


def test_two_workers_on_one_study_run_n_trials_none_lost_or_duplicated(tt, tmp_path):
    spec = sweep_spec(tmp_path / "p", {**SWEEP, "sampler": "random"}, step_seconds=0.2)
    workers = [tt.popen("sweep", spec, "--trials", "4", "--json") for _ in range(2)]
    outs = [w.communicate(timeout=600) for w in workers]
    assert [w.returncode for w in workers] == [0, 0], outs
    results = [json.loads(stdout) for stdout, _ in outs]
    numbers = [t["number"] for t in results[-1]["trials"]]
    assert len(numbers) == 4 and {t["state"] for t in results[-1]["trials"]} == {"complete"}
    run_dirs = [t["run_dir"] for t in results[-1]["trials"]]
    assert len(set(run_dirs)) == 4  # one run per trial
    folder = Path(run_dirs[0]).parent.parent
    study = optuna.load_study(study_name=folder.name, storage=f"sqlite:///{folder / 'study.db'}")
    ran = [t for t in study.trials if not t.user_attrs.get("surplus")]
    assert len(ran) == 4 and all(t.state.name == "COMPLETE" for t in ran)
    assert len({t.user_attrs["worker"] for t in ran}) == 2  # both workers ran trials of the one study
    assert sorted(p.name for p in (folder / "trials").iterdir()) == sorted(Path(d).name for d in run_dirs)
    for run in run_dirs:  # each trial's run ran its training once
        assert json.loads((Path(run) / "run.json").read_text())["status"] == "completed"
    assert results[0]["winner"]["number"] == results[1]["winner"]["number"]


def test_a_grid_sweep_runs_each_grid_point_once(tt, tmp_path):
    spec = sweep_spec(tmp_path / "p", None)
    data = json.loads(spec.read_text())
    del data["sweep"]
    spec.write_text(json.dumps(data))
    code, out = tt.json("sweep", spec)  # no block, no --sweep FILE
    assert code == 2 and out["error"]["message"].startswith("sweep: "), out
    grid = tmp_path / "grid.json"  # the block from a file (--sweep FILE)
    grid.write_text(json.dumps({"trials": 5, "sampler": "grid", "parameters": {"echo.steps": {"choice": [1, 2, 3]}}}))
    code, out = tt.json("sweep", spec, "--sweep", grid)
    assert code == 0, out
    assert sorted(t["params"]["echo.steps"] for t in out["trials"]) == [1, 2, 3]  # the grid's size, not 5


def test_a_bad_sweep_block_exits_2_naming_the_field_and_creates_nothing(tt, tmp_path):
    cases = [({**SWEEP, "trials": 0}, "sweep.trials"),
             ({**SWEEP, "parameters": {"echo.steps": {"int": [4, 1]}}}, "sweep.parameters.echo.steps.int"),
             ({**SWEEP, "parameters": {"echo.steps": {"int": [0, 2]}}}, "sweep.parameters.echo.steps"),
             ({**SWEEP, "parameters": {"examples.0.input": {"choice": ["a"]}}}, "sweep.parameters.examples.0.input"),
             ({**SWEEP, "sampler": "grid"}, "sweep.parameters.echo.learning_rate"),
             ({**SWEEP, "bogus": 1}, "sweep.bogus")]
    for number, (block, field) in enumerate(cases):
        folder = tmp_path / f"p{number}"
        spec = sweep_spec(folder, block)
        code, out = tt.json("sweep", spec)
        assert code == 2 and out["error"]["message"].startswith(field + ":"), (field, out)
        assert sorted(p.name for p in folder.iterdir()) == ["tunedtensor.json"]


def test_the_foundation_engines_settings_are_searched_and_checked_like_any_setting(tt, tmp_path):
    example = Path(__file__).parents[3] / "examples" / "foundation"
    folder = tmp_path / "f"
    folder.mkdir()
    for name in ("corpus.jsonl", "validation.txt"):
        shutil.copyfile(example / name, folder / name)
    spec = json.loads((example / "tunedtensor.json").read_text())
    spec["sweep"] = {"trials": 2, "parameters": {"foundation.finetune_learning_rate": {"log_uniform": [1e-4, 1e-2]},
                                                 "foundation.depth": {"int": [0, 4]}}}
    write_spec(folder, spec)
    code, out = tt.json("sweep", folder / "tunedtensor.json")
    assert code == 2 and out["error"]["message"].startswith(
        "sweep.parameters.foundation.depth: 0 is refused by the spec: foundation.depth"), out
    assert sorted(p.name for p in folder.iterdir()) == ["corpus.jsonl", "tunedtensor.json", "validation.txt"]


def test_tt_run_ignores_the_sweep_block_with_one_line(tt, tmp_path):
    spec = sweep_spec(tmp_path / "p")
    done = tt("run", spec, "--quiet")
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("`sweep` block is ignored by `tt run`") == 1
    assert not (spec.parent / ".tuned-tensor" / "sweeps").exists()
