"""A base model saved by transformers 4.x (tests/fixtures/tiny-llama-transformers4, made by
make_transformers4_base.py) trains, evaluates, exports merged and serves on the engine's transformers 5.

Its tokenizer_config.json names `PreTrainedTokenizerFast` (transformers 5 writes `TokenizersBackend`)
and its config.json `transformers_version` 4.x. One short run through the real stage entry points.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import torch

from tt_engine_adapter.runtime import generate, model_source
from tt_engine_adapter.testing import serving
from tt_engine_adapter.testing.harness import sentiment_run

FIXTURE = Path(__file__).parent / "fixtures" / "tiny-llama-transformers4"
HP = {"n_epochs": 1, "max_steps": 4, "learning_rate": 5e-3, "batch_size": 4, "lora_rank": 4, "lora_dropout": 0.0,
      "max_seq_length": 256, "max_new_tokens": 4, "seed": 3}  # long enough that no prompt is trimmed


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    root = tmp_path_factory.mktemp("tf4")
    base = root / "base"
    shutil.copytree(FIXTURE, base)  # the run fingerprints and may cache hashes: keep the committed folder untouched
    run = sentiment_run(root / "run", str(base), HP, n_train=16, n_eval=4)
    for stage in ("prepare", "prefetch", "train", "candidate"):  # baseline runs the same code as candidate
        run.stage(stage)
    return run, base


def test_fixture_was_saved_by_transformers_4():
    config = json.loads((FIXTURE / "config.json").read_text())
    assert config["transformers_version"].startswith("4.")
    assert json.loads((FIXTURE / "tokenizer_config.json").read_text())["tokenizer_class"] == "PreTrainedTokenizerFast"


def test_trains_and_evaluates(finished):
    run, _ = finished
    assert run.done["train"]["result"]["metrics"]["train.steps"] == 4
    assert len(run.predictions("candidate")) == 4
    assert run.done["candidate"]["result"]["metrics"]["candidate.trimmed_prompts"] == 0  # the server trims nothing either
    assert run.done["prefetch"]["result"]["outputs"]["end_of_turn_token"] == "<|eot_id|>"


def test_exports_merged_and_serves_the_candidates_answers(finished, tmp_path):
    run, base = finished
    adapter = Path(run.done["train"]["result"]["outputs"]["adapter"])
    request = tmp_path / "export.json"
    request.write_text(json.dumps({"source": str(adapter), "out": str(tmp_path / "merged"), "model_id": "tf4"}))
    proc = subprocess.run([sys.executable, "-m", "tt_engine_adapter.stages.export", str(request)], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    merged = tmp_path / "merged"
    prompts = run.eval_prompts
    answers = generate.generate(model_source.load_model(str(merged), "cpu", torch.float32),
                                model_source.load_tokenizer(str(merged)), prompts, max_new_tokens=4, batch_size=4,
                                max_seq_length=256, device="cpu")
    assert {a["id"]: a["prediction"] for a in answers} == run.predictions("candidate")

    with serving.start(tmp_path / "srv", base, adapter_path=adapter, model_name="tf4",
                       system_message=run.system) as server:
        first = prompts[0]
        reply = httpx.post(f"{server.url}/v1/chat/completions", timeout=60,
                           json={"model": "tf4", "messages": first["messages"][1:], "temperature": 0, "max_tokens": 4})
    assert reply.status_code == 200, reply.text
    assert reply.json()["choices"][0]["message"]["content"] == run.predictions("candidate")[first["id"]]
