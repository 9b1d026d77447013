"""Pipeline documents (tunedtensor.pipeline.json, Pipeline v1): `tt pipeline init | validate | plan | run`.

The contract's own fixtures (tests/fixtures/pipeline-contract/, copied from tunedtensor/pipeline-contract) are
read as the contract reads them. Runs use the echo test engine (its `baseline` stage evaluates the untrained
base); default-foundation validates and plans over the foundation example spec (host venv, nothing runs).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import REPO, echo_spec, write_spec
from example_copy_support import tracked_copy

FIXTURES = Path(__file__).parents[2] / "fixtures" / "pipeline-contract"


def files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def doc(*steps, **top) -> dict:
    return {"version": 1, "target": "local", **top, "steps": list(steps)}


TRAIN = {"id": "train", "uses": "train"}
BASE = {"id": "baseline", "uses": "evaluate", "with": {"model": "base"}}
CANDIDATE = {"id": "candidate", "uses": "evaluate", "with": {"model": {"from": "train.model"}}}


def run_pipeline(tt, folder: Path, document: dict, *args):
    path = folder / "tunedtensor.pipeline.json"
    path.write_text(json.dumps(document))
    return tt.json("pipeline", "run", "-f", path, "--spec", folder / "tunedtensor.json", *args)


def this_run(out: dict) -> dict:
    return {name: stage.get("this_run") for name, stage in out["report"]["stages"].items()}


def test_the_contract_fixtures_and_the_canonical_documents(tt, tmp_path):
    code, out = tt.json("pipeline", "validate", FIXTURES / "evaluation-only-local.input.json")
    assert code == 0 and out["pipeline"] == json.loads((FIXTURES / "evaluation-only-local.normalized.json").read_text())
    assert tt.json("pipeline", "init", tmp_path)[0] == 0
    code, out = tt.json("pipeline", "validate", tmp_path / "tunedtensor.pipeline.json")
    assert code == 0 and out["pipeline"]["name"] == "default-local"
    assert [s["id"] for s in out["pipeline"]["steps"]] == ["baseline", "train", "candidate", "compare"]
    assert tt.json("pipeline", "init", tmp_path)[0] == 2  # never overwritten
    (tmp_path / "f").mkdir()
    assert tt.json("pipeline", "init", tmp_path / "f", "--foundation")[0] == 0
    code, out = tt.json("pipeline", "validate", tmp_path / "f" / "tunedtensor.pipeline.json")
    assert code == 0 and out["pipeline"] == json.loads((FIXTURES / "canonical-foundation.normalized.json").read_text())
    code, out = tt.json("pipeline", "validate", FIXTURES / "invalid-forward-reference.input.json")
    assert code == 2 and "'candidate' references 'train.model'" in out["error"]["message"], out
    code, out = tt.json("pipeline", "validate", FIXTURES / "mixed-placement.input.json")
    assert code == 2 and "step 'candidate' targets 'cloud'" in out["error"]["message"], out


INVALID = {
    "unknown step": (doc(TRAIN, CANDIDATE), ("--only", "nope"), "unknown pipeline step 'nope'"),
    "omitted producer": (doc(TRAIN, CANDIDATE), ("--skip", "train"), "step 'candidate' depends on 'train'"),
    "empty selection": (doc(TRAIN, CANDIDATE), ("--skip", "train,candidate"), "leaves no pipeline steps"),
    "forward reference": (doc(CANDIDATE, TRAIN), (), "step 'candidate' references 'train.model'"),
    "two train steps": (doc(TRAIN, {"id": "again", "uses": "train"}), (), "step 'again': Pipeline v1 supports at most one train"),
    "non-local target": (doc(TRAIN, {**CANDIDATE, "target": "cloud"}), (), "step 'candidate' targets 'cloud'"),
    "bad step id": (doc({"id": "Train", "uses": "train"}), (), "steps.0.id"),
    "a with block on train": (doc({**TRAIN, "with": {"steps": 2}}), (), "steps.0.with: unknown field"),
    "foundation vocabulary on echo": (doc({"id": "tok", "uses": "tokenize"}, runtime={"engine": "foundation"}), (),
                                      "the pipeline is a foundation recipe"),
}


@pytest.mark.parametrize("case", sorted(INVALID))
def test_invalid_documents_exit_2_naming_the_step_and_create_nothing(tt, tmp_path, case):
    document, args, message = INVALID[case]
    write_spec(tmp_path, echo_spec(steps=2, baseline=True))
    before = files(tmp_path)
    for command in ("run", "plan"):
        path = tmp_path / "p.json"
        path.write_text(json.dumps(document))
        code, out = tt.json("pipeline", command, "-f", path, "--spec", tmp_path / "tunedtensor.json", *args)
        assert code == 2 and message in out["error"]["message"], (command, out)
        path.unlink()
        assert files(tmp_path) == before
    assert not (tmp_path / "tt-home" / "runs").exists()


def test_default_local_validates_plans_and_runs(tt, tmp_path):
    write_spec(tmp_path, echo_spec(steps=2, baseline=True))
    tt.json("pipeline", "init", tmp_path)
    code, plan = tt.json("pipeline", "plan", "--spec", tmp_path / "tunedtensor.json")  # ./tunedtensor.pipeline.json
    assert code == 0, plan
    assert {s["id"]: s["stages"] for s in plan["steps"]} == {
        "baseline": ["prepare", "baseline"], "train": ["prepare", "train"],
        "candidate": ["prepare", "train", "evaluate"], "compare": []}
    assert not (tmp_path / ".tuned-tensor").exists()  # plan creates nothing
    code, out = tt.json("pipeline", "run", "--spec", tmp_path / "tunedtensor.json")
    assert code == 0, out
    assert this_run(out) == {"prepare": "ran", "train": "ran", "evaluate": "ran", "baseline": "ran"}
    run = Path(out["run_dir"])
    baseline = json.loads((run / "evaluations" / "baseline.json").read_text())
    candidate = json.loads((run / "evaluations" / "candidate.json").read_text())
    compare = json.loads((run / "evaluations" / "compare.json").read_text())
    assert baseline["model"] == "base" and candidate["model"] == {"from": "train.model"}
    assert baseline["metrics"] and all(k.startswith("baseline.") for k in baseline["metrics"])
    assert candidate["metrics"] and all(k.startswith("candidate.") for k in candidate["metrics"])
    common = {k.split(".", 1)[1] for k in baseline["metrics"]} & {k.split(".", 1)[1] for k in candidate["metrics"]}
    assert common and set(compare["difference"]) <= common
    name = sorted(common)[0]
    assert compare["difference"][name] == candidate["metrics"][f"candidate.{name}"] - baseline["metrics"][f"baseline.{name}"]


def test_partial_and_repeated_pipelines_reuse_what_is_finished(tt, tmp_path):
    write_spec(tmp_path, echo_spec(steps=2, baseline=True))
    run = tmp_path / "run"
    shutil.copy(FIXTURES / "evaluation-only-local.input.json", tmp_path / "eval-only.json")
    code, out = tt.json("pipeline", "run", "-f", tmp_path / "eval-only.json", "--spec", tmp_path / "tunedtensor.json",
                        "--resume", run)
    assert code == 0, out
    assert this_run(out) == {"prepare": "ran", "train": "left", "evaluate": "left", "baseline": "ran"}  # no training
    state = json.loads((run / "run.json").read_text())
    assert state["stages"]["train"]["state"] == "pending" and not (run / "train").exists()
    assert (run / "evaluations" / "baseline.json").is_file()

    code, out = run_pipeline(tt, tmp_path, doc(TRAIN), "--resume", run)
    assert code == 0, out
    assert this_run(out) == {"prepare": "reused", "train": "ran", "evaluate": "left", "baseline": "reused"}
    code, out = run_pipeline(tt, tmp_path, doc(TRAIN, CANDIDATE), "--resume", run)  # one more evaluate step
    assert code == 0, out
    assert this_run(out) == {"prepare": "reused", "train": "reused", "evaluate": "ran", "baseline": "reused"}
    again = {"id": "again", "uses": "evaluate", "with": {"model": {"from": "train.model"}}}
    code, out = run_pipeline(tt, tmp_path, doc(TRAIN, CANDIDATE, again), "--resume", run)
    assert code == 0 and set(this_run(out).values()) == {"reused"}, out  # the same model again: nothing runs
    assert json.loads((run / "evaluations" / "again.json").read_text())["metrics"] == json.loads(
        (run / "evaluations" / "candidate.json").read_text())["metrics"]
    assert [s["evaluation"] for s in out["steps"]] == [None, "evaluations/candidate.json", "evaluations/again.json"]


def test_default_foundation_validates_and_plans(tt, tmp_path):
    tracked_copy("examples/foundation", tmp_path / "f")
    spec = json.loads((tmp_path / "f" / "tunedtensor.json").read_text())
    spec["foundation"]["rl_steps"] = 0  # default-foundation has no rl step
    (tmp_path / "f" / "tunedtensor.json").write_text(json.dumps(spec))
    tt.json("pipeline", "init", tmp_path / "f", "--foundation")
    proc = tt("pipeline", "plan", "-f", tmp_path / "f" / "tunedtensor.pipeline.json", "--spec",
              tmp_path / "f" / "tunedtensor.json", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    plan = json.loads(proc.stdout)
    assert {s["id"]: s["stages"] for s in plan["steps"]} == {
        "tokenize": ["tokenizer", "token_cache"], "pretrain": ["pretrain"], "bpb": ["bpb"], "sft": ["sft"],
        "chat": ["chat_eval", "general_baseline"], "infer": ["chat_eval"]}
    assert any("pretrain.steps is 2" in w for w in plan["warnings"]) and "the spec decides" in proc.stderr
    echo_spec_doc = tmp_path / "local.json"
    echo_spec_doc.write_text(json.dumps(doc(TRAIN)))
    code, out = tt.json("pipeline", "plan", "-f", echo_spec_doc, "--spec", tmp_path / "f" / "tunedtensor.json")
    assert code == 2 and "behavior" in out["error"]["message"], out
    spec["foundation"]["rl_steps"] = 2  # chat_eval then reads rl, which default-foundation has no step for
    (tmp_path / "f" / "tunedtensor.json").write_text(json.dumps(spec))
    code, out = tt.json("pipeline", "plan", "-f", tmp_path / "f" / "tunedtensor.pipeline.json", "--spec",
                        tmp_path / "f" / "tunedtensor.json")
    assert code == 2 and not out["ok"], out
    (refused,) = [s for s in out["stages"] if s["action"] == "refuse"]
    assert refused["stage"] == "chat_eval" and "'rl'" in refused["reason"]
    assert not (tmp_path / "f" / ".tuned-tensor").exists()


def test_the_shipped_vocabularies_speak_the_contract_and_a_foreign_word_is_named():
    """Each installed engine's from-scratch vocabulary names only the contract's step kinds, evaluators and `with`
    keys (the contract's table is their one definition); a word the contract lacks is named."""
    from tt_host.pipelines.document import vocabulary_problems
    from tt_host.plugins import load_plugins

    vocabularies = [e.pipeline_vocabulary for e in load_plugins().engines.values() if e.pipeline_vocabulary]
    assert vocabularies  # the foundation engine declares one
    for vocabulary in vocabularies:
        assert vocabulary_problems(vocabulary.steps, vocabulary.settings) == []
    assert vocabulary_problems({"tokenize": ("t",), "distill": ("d",)},
                               {"pretrain": {"depth": "depth", "width": "w"}, "merge": {}}) == [
        "steps: 'distill' is no step kind or evaluator of the from-scratch vocabulary",
        "settings.pretrain: 'width' is no `with` key of a pretrain step",
        "settings: 'merge' is no step kind of the from-scratch vocabulary"]


def test_set_reaches_the_spec_a_pipeline_document_runs_and_plans(tt, tmp_path):
    """`tt pipeline run -f DOC --set KEY=VALUE` trains with the override (the frozen spec.json records it) and
    `tt pipeline plan -f DOC --set` refuses a bad one naming the key, exit 2: a document never drops them."""
    write_spec(tmp_path, echo_spec(steps=2, baseline=True))
    run = tmp_path / "run"
    code, out = run_pipeline(tt, tmp_path, doc(TRAIN, CANDIDATE), "--set", "echo.steps=4", "--resume", run)
    assert code == 0 and out["report"]["metrics"]["train.steps"] == 4, out
    assert json.loads((run / "spec.json").read_text())["echo"]["steps"] == 4
    code, out = tt.json("pipeline", "plan", "-f", tmp_path / "tunedtensor.pipeline.json", "--spec",
                        tmp_path / "tunedtensor.json", "--set", "echo.steps=0")
    assert code == 2 and "echo.steps" in json.dumps(out), out
