"""Adapter engine end to end through `tt run` on CPU with a tiny locally built base model.

The shared run's base model is built by the engine environment's transformers 5
(tokenizer class `TokenizersBackend`) and given as hub id `tt-test/tiny` at
revision `main`, found in a Hugging Face cache of the test's own with
HF_HUB_OFFLINE=1: prefetch resolves `main` through the cache's refs/main to its
commit and the run and the adapter's manifest record that commit.
Item 1: the candidate beats the baseline on held-out sentiment rows, and the
adapter loads with plain `PeftModel.from_pretrained` (transformers 5, in the
engine's environment, separate from the host's) giving tt's outputs.
Item 3: an interrupted training resumed with `--resume` ends with the same
adapter weights and step count. Item 4: one changed byte makes `tt models
verify` fail and name the file.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest

from adapter_support import (COMPARE, PEFT_CHECK, TT_BIN, engine_python, engine_run, hub_cache, only_run_dir,
                             shared_tiny_model, tt, tt_env, write_spec)
from process_tree import frozen

HUB_ID, COMMIT = "tt-test/tiny", "c0ffee0123456789abcdef0123456789abcdef01"


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("adapter-e2e")


@pytest.fixture(scope="module")
def python(home) -> str:
    return engine_python(home)


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Iterator[Path]:
    with shared_tiny_model(tmp_path_factory) as model:
        yield model


@pytest.fixture(scope="module")
def snapshot(home, model) -> Path:
    return hub_cache(home, model, HUB_ID, COMMIT, ref="main")


@pytest.fixture(scope="module")
def finished(home, snapshot) -> Path:
    spec = write_spec(home / "straight", HUB_ID, base_model_revision="main")
    proc = tt(home, "run", spec)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return only_run_dir(home / "straight")


def test_base_saved_by_transformers_5(model):
    config = json.loads((model / "config.json").read_text())
    assert int(config["transformers_version"].split(".")[0]) >= 5
    assert json.loads((model / "tokenizer_config.json").read_text())["tokenizer_class"] == "TokenizersBackend"


def test_main_resolves_offline_to_the_cached_commit_recorded_in_run_and_manifest(finished, snapshot):
    prefetch = json.loads((finished / "prefetch" / "result.json").read_text())
    base = prefetch["outputs"]["base_model"]
    assert base == {"path": str(snapshot), "name": HUB_ID, "revision": COMMIT, "requested_revision": "main",
                    "fingerprint": None}
    recorded = json.loads((finished / "train" / "adapter" / "artifact-manifest.json").read_text())["base_model"]
    assert recorded["revision"] == COMMIT and recorded["requested_revision"] == "main"
    assert json.loads((finished / "train" / "adapter" / "tt-adapter.json").read_text())["base_model"]["revision"] == COMMIT


def test_candidate_beats_baseline_and_report(finished):
    report = json.loads((finished / "report.json").read_text())
    metrics = report["metrics"]
    assert report["status"] == "completed"
    for key in ("baseline.exact_match", "candidate.exact_match", "baseline.token_f1", "candidate.token_f1",
                "train.final_loss", "train.tokens_per_second", "eval.count"):
        assert key in metrics, key
    assert metrics["candidate.exact_match"] > metrics["baseline.exact_match"]
    assert metrics["eval.count"] >= 10
    markdown = (finished / "report.md").read_text()
    assert "baseline" in markdown and "candidate" in markdown and ".svg" in markdown


def test_plain_peft_reproduces_tt_evaluation(finished, snapshot, home, python):
    adapter = finished / "train" / "adapter"
    assert (adapter / "adapter_config.json").is_file() and (adapter / "adapter_model.safetensors").is_file()
    version_check = "import transformers; assert int(transformers.__version__.split('.')[0]) >= 5\n"
    out = engine_run(python, home, "-c", version_check + PEFT_CHECK,
                     str(snapshot), str(adapter),
                     str(finished / "candidate" / "request.json"), "6")
    peft_answers = json.loads(out.stdout.strip().splitlines()[-1])
    tt_answers = {}
    for line in (finished / "candidate" / "predictions.jsonl").read_text().splitlines():
        row = json.loads(line)
        tt_answers[row["id"]] = row["prediction"]
    assert peft_answers == tt_answers


def test_models_verify_names_the_changed_file(finished, home):
    proc = tt(home, "models", "list", "--json")
    assert proc.returncode == 0, proc.stderr
    listed = json.loads(proc.stdout)
    models = listed["models"] if isinstance(listed, dict) else listed
    registered = next(m for m in models if str(finished) in json.dumps(m))
    model_id = registered["id"]
    ok = tt(home, "models", "verify", model_id)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    target = Path(registered["path"]) / "adapter_model.safetensors"  # the registered version's own copy
    original = target.read_bytes()
    data = bytearray(original)
    data[len(data) // 2] ^= 0x01
    target.write_bytes(bytes(data))
    try:
        bad = tt(home, "models", "verify", model_id)
        assert bad.returncode == 1
        assert "adapter_model.safetensors" in bad.stdout + bad.stderr
    finally:
        target.write_bytes(original)


def test_interrupted_training_resumes_to_the_same_adapter(finished, home, model, python):
    """The interrupted run names the same base as a local folder: same weights, same adapter."""
    spec = write_spec(home / "interrupted", str(model))
    run_dir = home / "interrupted-run"
    env = dict(tt_env(home), TT_HOLD_AT_STEP="6")  # training waits after step 6 (checkpoint at 5) for the signal
    proc = subprocess.Popen([TT_BIN, "run", str(spec), "--resume", str(run_dir)], env=env, cwd=home,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 600
    checkpoints = run_dir / "train" / "checkpoints"
    while not (checkpoints.is_dir() and any(p.name.startswith("step-") for p in checkpoints.iterdir())):
        assert proc.poll() is None and time.monotonic() < deadline, "no checkpoint while training ran"
        time.sleep(0.05)
    with frozen(proc.pid):  # held while it is checked and signalled: it cannot finish in between
        assert proc.poll() is None and not (run_dir / "train" / "adapter").exists(), "training ended first"
        proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 130, out[-3000:]
    assert not (run_dir / "train" / "adapter").exists()

    resumed = tt(home, "run", spec, "--resume", run_dir)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    log = (run_dir / "logs" / "train.log").read_text()
    assert "resumed from step-" in log
    a = json.loads((finished / "train" / "result.json").read_text())
    b = json.loads((run_dir / "train" / "result.json").read_text())
    assert a["metrics"]["train.steps"] == b["metrics"]["train.steps"]
    assert a["series"]["train.loss"] == b["series"]["train.loss"]
    out = engine_run(python, home, "-c", COMPARE, str(finished / "train/adapter/adapter_model.safetensors"),
                     str(run_dir / "train/adapter/adapter_model.safetensors"))
    compared = json.loads(out.stdout.strip().splitlines()[-1])
    assert compared["same_keys"] and compared["count"] > 0
    assert compared["max_diff"] <= 1e-6


def test_a_second_run_of_the_unchanged_spec_reuses_the_baseline(finished, home):
    """The cross-run baseline cache: the same spec (written elsewhere) starts no baseline stage process."""
    proc = tt(home, "run", write_spec(home / "again", HUB_ID, base_model_revision="main"))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    again = only_run_dir(home / "again")
    report, first = (json.loads((run / "report.json").read_text()) for run in (again, finished))
    assert report["stages"]["baseline"]["this_run"] == f"reused from run {finished.name}"
    assert any(f"baseline reused from run {finished.name}" in note for note in report["notes"])
    assert not (again / "logs" / "baseline.log").exists()  # no stage process was started
    assert {k: v for k, v in report["metrics"].items() if k.startswith("baseline.")} == \
        {k: v for k, v in first["metrics"].items() if k.startswith("baseline.")}
    assert str(finished) not in (again / "baseline" / "result.json").read_text()
    assert report["stages"]["candidate"]["this_run"] == "ran"
