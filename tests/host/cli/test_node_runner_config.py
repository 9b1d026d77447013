"""The Node CLI 0.13's `local-runner.json` keys as tt reads them: `dryRun`, `evaluation.timeoutMs`,
`paths.modelCache` (HF_HOME, `~` expanded), and bad configs refused by key (exit 2, nothing created, never a hang).
Runs use the echo test engine; `tt validate` of an adapter spec needs only the host venv.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from conftest import echo_spec, write_spec
from node_spec_support import COMMIT, node_init_spec


def test_dry_run_true_makes_tt_run_a_dry_run(tt, tmp_path):
    write_spec(tmp_path, echo_spec(steps=2))
    (tmp_path / "local-runner.json").write_text(json.dumps({"dryRun": True}))
    code, out = tt.json("run")
    assert code == 0 and out["dry_run"] is True, out
    assert not (tmp_path / ".tuned-tensor").exists()
    said = [line for line in tt("run").stderr.splitlines() if "dryRun" in line]
    assert len(said) == 1 and "create nothing" in said[0], said
    (tmp_path / "local-runner.json").write_text(json.dumps({"dryRun": False}))
    code, out = tt.json("run")
    assert code == 0 and out["status"] == "completed", out


def test_evaluation_timeout_stops_an_evaluation_stage_and_the_run_fails(tt, tmp_path):
    # training (0.8 s) is not bounded; the evaluate stage sleeps 60 s and is stopped after 1.5 s
    write_spec(tmp_path, echo_spec(steps=4, step_seconds=0.2, eval_seconds=60))
    (tmp_path / "local-runner.json").write_text(json.dumps({"evaluation": {"timeoutMs": 1500}}))
    started = time.monotonic()
    code, out = tt.json("run")
    took = time.monotonic() - started
    assert code == 1 and out["status"] == "failed", out
    assert "time limit of 1.5 s" in out["error"]["message"] and "evaluation.timeoutMs" in out["error"]["message"], out
    assert took < 30, took
    state = json.loads((Path(out["run_dir"]) / "run.json").read_text())
    assert state["stages"]["train"]["state"] == "completed" and state["stages"]["evaluate"]["state"] == "failed"


def _hub(root: Path, repo: str = "org/tiny-model") -> None:
    folder = root / ("models--" + repo.replace("/", "--"))
    (folder / "snapshots" / COMMIT).mkdir(parents=True)
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text(COMMIT)


def test_model_cache_is_hf_home_with_the_tilde_expanded(tt, tmp_path):
    home = tmp_path / "user"
    _hub(home / ".cache" / "hf-node" / "hub")  # HF_HOME layout: models under <HF_HOME>/hub
    tt.env.update({"HOME": str(home)})
    tt.env.pop("HF_HUB_CACHE", None)
    spec = node_init_spec()
    spec["base_model"] = "org/tiny-model"
    write_spec(tmp_path, spec)
    (tmp_path / "local-runner.json").write_text(json.dumps({"paths": {"modelCache": "~/.cache/hf-node"}}))
    code, out = tt.json("validate")
    assert code == 0, out
    (pin,) = [w["msg"] for w in out["warnings"] if w["loc"] == "base_model_revision"]
    assert COMMIT in pin, pin  # found in ~/.cache/hf-node/hub: `~` expanded, read as HF_HOME
    (said,) = [w["msg"] for w in out["warnings"] if w["loc"].endswith(":paths.modelCache")]
    assert f"HF_HOME={home / '.cache' / 'hf-node'}" in said, said


BAD = [  # (config, spec change, the key the error names, words in it)
    ({"paths": {"modelCache": "hf\x00x"}}, {}, "paths.modelCache", "NUL"),
    ({"evaluation": {"maxExamples": 3}}, {"hyperparameters": [1]}, "evaluation.maxExamples", "not an object"),
    ({"evaluation": {"generalRegression": {"dataset": "g.jsonl"}}}, {"evaluation": "strict"},
     "evaluation.generalRegression", "not an object"),
    ({"evaluation": {"generalRegression": "g.jsonl"}}, {}, "evaluation.generalRegression", "must be an object"),
    ({"evaluation": {"timeoutMs": "soon"}}, {}, "evaluation.timeoutMs", "milliseconds"),
    ({"evaluation": {"timeoutMs": 50}}, {}, "evaluation.timeoutMs", "at least 100"),
    ({"dryRun": "yes"}, {}, "dryRun", "true or false"),
    ({"evaluation": {"baselineCache": 1}}, {}, "evaluation.baselineCache", "true or false"),
    ({"evaluation": {"inference": {"temperature": "hot"}}}, {}, "evaluation.inference.temperature", "must be int"),
    ({"evaluation": {"scoring": {"mode": 1}}}, {}, "evaluation.scoring.mode", "must be str"),
    ({"evaluation": {"timeoutMS": 1000}}, {}, "evaluation.timeoutMS", "misspelled"),
]


def test_bad_runner_configs_exit_2_naming_the_key_and_create_nothing(tt, tmp_path):
    for config, change, key, words in BAD:
        folder = tmp_path / f"case{BAD.index((config, change, key, words))}"
        write_spec(folder, {**node_init_spec(), **change})
        (folder / "local-runner.json").write_text(json.dumps(config))
        before = sorted(folder.rglob("*"))
        for command in ("validate", "run"):
            proc = tt(command, folder / "tunedtensor.json", "--json")
            assert proc.returncode == 2 and "Traceback" not in proc.stderr, (config, proc.stderr)
            out = json.loads(proc.stdout)
            named = [e for e in out["errors"] if e["loc"] == f"{folder / 'local-runner.json'}:{key}"]
            assert named and words in named[0]["msg"], (config, out["errors"])
        assert sorted(folder.rglob("*")) == before, config


def test_a_config_that_is_not_a_regular_file_is_refused_without_opening_it(tt, tmp_path):
    write_spec(tmp_path, node_init_spec())
    config = tmp_path / "local-runner.json"
    for make, kind in ((lambda: os.mkfifo(config), "FIFO"), (lambda: config.symlink_to("/dev/zero"), "device"),
                       (lambda: config.mkdir(), "folder")):
        make()
        started = time.monotonic()
        proc = tt("validate", "--json", timeout=30)  # a FIFO opened for reading would block here
        assert proc.returncode == 2 and time.monotonic() - started < 20, (kind, proc.stdout, proc.stderr)
        out = json.loads(proc.stdout)
        assert out["errors"][0]["loc"] == "local-runner.json" and "not a regular file" in out["errors"][0]["msg"], out
        config.rmdir() if config.is_dir() and not config.is_symlink() else config.unlink()


def test_values_tt_does_not_use_are_accepted_with_a_warning_and_baseline_cache_false_takes_effect(tt, tmp_path):
    write_spec(tmp_path, echo_spec(steps=2, baseline=True))
    config = {"evaluation": {"inference": {"temperature": 0.7, "topP": 0.9}, "scoring": {"mode": "json_fields"},
                             "baselineCache": False}}
    (tmp_path / "local-runner.json").write_text(json.dumps(config))
    code, out = tt.json("validate")
    assert code == 0, out
    said = {w["loc"].split(":", 1)[1]: w["msg"] for w in out["warnings"] if "local-runner.json" in w["loc"]}
    assert "0.7 is not used" in said["evaluation.inference.temperature"] and "greedy" in said[
        "evaluation.inference.temperature"], said
    assert "'json_fields' is not used" in said["evaluation.scoring.mode"], said
    assert "TT_NO_BASELINE_CACHE" in said["evaluation.baselineCache"], said
    stages = []
    for _ in range(2):  # with the cache off, the second run evaluates its baseline again
        code, ran = tt.json("run")
        assert code == 0, ran
        stages.append(ran["report"]["stages"]["baseline"]["this_run"])
    assert stages == ["ran", "ran"], stages
