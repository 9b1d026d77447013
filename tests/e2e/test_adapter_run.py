"""Adapter engine end to end through `tt run` on CPU with a tiny locally built base model.

Item 1: the candidate beats the baseline on held-out sentiment rows, and the
adapter loads with plain `PeftModel.from_pretrained` giving tt's outputs.
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

import pytest

from adapter_support import (COMPARE, PEFT_CHECK, TT_BIN, build_tiny_model, engine_python, engine_run,
                             only_run_dir, tt, tt_env, write_spec)


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("adapter-e2e")


@pytest.fixture(scope="module")
def python(home) -> str:
    return engine_python(home)


@pytest.fixture(scope="module")
def model(home, python) -> Path:
    return build_tiny_model(python, home, home / "tiny-llama", arch="llama")


@pytest.fixture(scope="module")
def finished(home, model) -> Path:
    spec = write_spec(home / "straight", str(model))
    proc = tt(home, "run", spec)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return only_run_dir(home / "straight")


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


def test_plain_peft_reproduces_tt_evaluation(finished, model, home, python):
    adapter = finished / "train" / "adapter"
    assert (adapter / "adapter_config.json").is_file() and (adapter / "adapter_model.safetensors").is_file()
    out = engine_run(python, home, "-c", PEFT_CHECK, str(model), str(adapter),
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
    model_id = next(m["id"] for m in models if str(finished) in json.dumps(m))
    ok = tt(home, "models", "verify", model_id)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    target = finished / "train" / "adapter" / "adapter_model.safetensors"
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
    spec = write_spec(home / "interrupted", str(model))
    run_dir = home / "interrupted-run"
    proc = subprocess.Popen([TT_BIN, "run", str(spec), "--resume", str(run_dir)], env=tt_env(home), cwd=home,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 600
    checkpoints = run_dir / "train" / "checkpoints"
    while time.monotonic() < deadline and proc.poll() is None:
        if checkpoints.is_dir() and any(p.name.startswith("step-") for p in checkpoints.iterdir()):
            break
        time.sleep(0.05)
    assert proc.poll() is None, "training ended before it could be interrupted"
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
