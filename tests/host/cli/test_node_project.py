"""A project the Node CLI 0.13 made: `tt status` / `tt info` there, and its `local-runner.json` (every documented
key of Node's localRunnerConfigSchema, src/local-runtime/contracts.ts of tunedtensor/tuned-tensor-cli) taking effect
or refused by name. Host-only (the adapter's schema), plus one echo run for the latest run and the active model.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

from conftest import echo_spec, write_spec
from node_spec_support import COMMIT, UUID, node_init_spec

NODE_CONFIG = {  # every key, with the values Node documented as defaults (paths are the test's)
    "storeRoot": ".tuned-tensor/store", "artifactRoot": ".tuned-tensor/artifacts", "dryRun": False,
    "paths": {"baseModel": "org/tiny-model", "modelCache": "hf"},
    "evaluation": {"inference": {"maxNewTokens": 256, "temperature": 0, "topP": 1, "device": "cpu"},
                   "scoring": {"mode": "exact_match", "fields": ["label"]}, "timeoutMs": 1800000, "maxExamples": 5,
                   "sampleSeed": 7, "baselineCache": True,
                   "generalRegression": {"dataset": "general.jsonl", "maxScoreDrop": 0.03, "maxPassRateDrop": 0.05}},
}
NOTED = {"storeRoot": "TT_HOME", "artifactRoot": "run folder", "evaluation.scoring.fields": "JSON-field",
         "evaluation.sampleSeed": "deterministic split"}  # accepted, not read: the warning says what tt does
APPLIED = {"paths.baseModel": "base_model", "evaluation.inference.maxNewTokens": "hyperparameters.max_new_tokens",
           "evaluation.inference.device": "device", "evaluation.maxExamples": "hyperparameters.max_eval_examples",
           "evaluation.generalRegression": "evaluation.general_regression", "paths.modelCache": "HF_HOME",
           "evaluation.timeoutMs": "each evaluation stage is stopped after 1800000 ms"}
ACCEPTED = ("dryRun", "evaluation.inference.temperature", "evaluation.inference.topP", "evaluation.scoring.mode",
            "evaluation.baselineCache")


def hub_cache(folder: Path) -> None:
    repo = folder / "hf" / "hub" / "models--org--tiny-model"  # paths.modelCache is HF_HOME: models in its hub/
    (repo / "snapshots" / COMMIT).mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)


def node_project(folder: Path, config: dict) -> None:
    spec = node_init_spec()
    spec.pop("base_model")  # the config's paths.baseModel gives it
    write_spec(folder, spec)
    (folder / "local-runner.json").write_text(json.dumps(config))
    row = {"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]}
    (folder / "general.jsonl").write_text(json.dumps(row) + "\n")
    hub_cache(folder)


def test_every_local_runner_key_takes_effect_or_is_accepted_with_one_warning(tt, tmp_path):
    config = copy.deepcopy(NODE_CONFIG)
    node_project(tmp_path, config)
    code, out = tt.json("validate")  # ./tunedtensor.json, ./local-runner.json beside it
    assert code == 0, out
    said = {w["loc"].split(":", 1)[1]: w["msg"] for w in out["warnings"] if w["loc"].startswith(str(tmp_path))}
    assert set(said) == set(APPLIED) | set(ACCEPTED) | set(NOTED), said
    assert len([w for w in out["warnings"] if w["loc"].startswith(str(tmp_path))]) == len(said)  # one per key
    for key, target in {**APPLIED, **NOTED}.items():
        assert target in said[key] and f"`{key}`" in said[key], (key, said[key])
    (pin,) = [w["msg"] for w in out["warnings"] if w["loc"] == "base_model_revision"]
    assert COMMIT in pin  # paths.modelCache took effect: the pin line read that cache
    # applied to the spec: a conflicting spec value is refused, and the gate's dataset is the spec's to check
    spec = json.loads((tmp_path / "tunedtensor.json").read_text())
    write_spec(tmp_path, {**spec, "device": "cuda"})
    code, out = tt.json("validate")
    assert code == 2 and [e["loc"] for e in out["errors"]] == [f"{tmp_path / 'local-runner.json'}:evaluation.inference.device"]
    write_spec(tmp_path, spec)
    (tmp_path / "general.jsonl").unlink()
    code, out = tt.json("validate")
    assert code == 2 and out["errors"][0]["loc"].startswith("evaluation.general_regression"), out
    code, out = tt.json("validate", "--config", tmp_path / "nope.json")
    assert code == 2 and "nope.json" in json.dumps(out["errors"])
    (tmp_path / "typo.json").write_text(json.dumps({"evaluation": {"maxExample": 5}}))
    code, out = tt.json("validate", "--config", tmp_path / "typo.json")
    assert code == 2 and out["errors"][0]["loc"].endswith(":evaluation.maxExample")


def snapshot(folder: Path) -> dict[str, float]:
    return {str(p): p.stat().st_mtime_ns for p in folder.rglob("*")}


def test_status_and_info_in_a_node_project_print_it_and_create_nothing(tt, tmp_path):
    spec = {**echo_spec(steps=2), "id": UUID}
    write_spec(tmp_path, spec)
    (tmp_path / "local-runner.json").write_text(json.dumps({"dryRun": False, "evaluation": {"baselineCache": True}}))
    code, ran = tt.json("run")
    assert code == 0, ran
    model = ran["report"]["models"][0]["id"]
    assert tt("models", "activate", model, "--force").returncode == 0
    empty = tmp_path / "empty"
    empty.mkdir()
    before = snapshot(tmp_path)
    code, status = tt.json("status")
    assert code == 0, status
    assert status["spec"]["path"] == str(tmp_path / "tunedtensor.json") and status["spec"]["valid"]
    assert status["spec"]["spec_id"] == UUID and status["spec"]["config"] == str(tmp_path / "local-runner.json")
    assert status["active_model"] == model
    assert status["latest_run"]["run_dir"] == ran["run_dir"] and status["latest_run"]["status"] == "completed"
    human = tt("status")
    assert human.returncode == 0
    for shown in ("tunedtensor.json", "local-runner.json", model, Path(ran["run_dir"]).name):
        assert shown in human.stdout, (shown, human.stdout)
    code, info = tt.json("info")
    assert code == 0 and info["tt_home"] == str(tmp_path / "tt-home") and "echo" in info["engines"]
    assert tt("info").returncode == 0
    code, bare = tt.json("status", empty / "tunedtensor.json")
    assert code == 0 and bare["spec"]["found"] is False
    assert snapshot(tmp_path) == before
