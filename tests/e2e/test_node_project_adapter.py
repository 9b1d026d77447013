"""A spec exactly as Node 0.13's `tt init` writes it (UUID `id`, `name`, a hub base model without a revision), run
by tt with the adapter engine, offline against a Hugging Face cache of the test's own: the spec validates with one
warning per legacy item (the pin line names the cached commit), and an evaluate-only pipeline (the contract's
evaluation-only fixture) reaches prefetch, which resolves `main` and records the commit, then evaluates the base
model; no training stage runs. The run and its stages record the Node id. Tiny model, CPU, seconds.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Iterator

import pytest

from adapter_support import hub_cache, sentiment_examples, shared_tiny_model, tt

HUB_ID, COMMIT = "tt-test/node-tiny", "abcdef0123456789abcdef0123456789abcdef01"
UUID = "0d9f4c3b-2a1e-4f6d-9c8b-7a6e5d4c3b2a"
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "pipeline-contract" / "evaluation-only-local.input.json"


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("node-adapter")


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Iterator[Path]:
    with shared_tiny_model(tmp_path_factory) as model:
        yield model


def test_a_node_init_spec_runs_to_prefetch_which_records_the_commit(home, model):
    snapshot = hub_cache(home, model, HUB_ID, COMMIT, ref="main")
    project = home / "project"
    project.mkdir()
    spec = {"id": UUID, "name": "Sentiment", "description": "", "base_model": HUB_ID,
            "system_prompt": "Classify the sentiment of the movie review.", "guidelines": [], "constraints": [],
            "examples": sentiment_examples()[:16], "eval_cases": [],
            "hyperparameters": {"max_seq_length": 128, "max_new_tokens": 4}}
    (project / "tunedtensor.json").write_text(json.dumps(spec, indent=2))
    proc = tt(home, "validate", project / "tunedtensor.json", "--json")
    out = json.loads(proc.stdout)
    assert proc.returncode == 0, out
    assert [w["loc"] for w in out["warnings"]] == ["id", "base_model_revision", "eval_cases"]
    assert f'"base_model_revision": "{COMMIT}",' in out["warnings"][1]["msg"]

    shutil.copy(FIXTURE, project / "tunedtensor.pipeline.json")
    run = project / "run"
    proc = tt(home, "pipeline", "run", "-f", project / "tunedtensor.pipeline.json", "--spec",
              project / "tunedtensor.json", "--resume", run, "--json")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    ran = {name: stage.get("this_run") for name, stage in out["report"]["stages"].items()}
    skipped = dict.fromkeys(("sft", "reference", "preference", "reinforce"), "skipped")  # no tuning block here
    assert ran == {"prepare": "ran", "prefetch": "ran", "baseline": "ran", "train": "left", "candidate": "left",
                   **skipped}
    base = json.loads((run / "prefetch" / "result.json").read_text())["outputs"]["base_model"]
    assert base["revision"] == COMMIT and base["requested_revision"] == "main" and base["path"] == str(snapshot)
    state = json.loads((run / "run.json").read_text())
    assert state["spec_id"] == UUID and json.loads((run / "spec.json").read_text())["base_model_revision"] == "main"
    assert not (run / "train").exists()
    assert json.loads((run / "evaluations" / "baseline.json").read_text())["metrics"]
