"""Adapter training with 2 processes (torchrun, gloo on CPU) through `tt run` (issue 6, item 3).

The adapter trained by two DistributedDataParallel ranks is registered and `tt models verify`
accepts it; its loss curve matches a 1-process run of the same schedule (LoRA dropout 0), because
each rank computes half of every micro-batch and scales by the global supervised-token count.
SIGTERM reaches both ranks, which stop after the same step with one checkpoint; resuming it with
another world size is refused with a message naming it, and with the same one it completes.
"""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest

from adapter_support import TT_BIN, build_tiny_model, engine_python, only_run_dir, tt, tt_env, write_spec

HP = {"n_epochs": 2, "batch_size": 8, "max_eval_examples": 8, "checkpoint_interval_steps": 4}


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("adapter-ddp")


@pytest.fixture(scope="module")
def model(home) -> Path:
    return build_tiny_model(engine_python(home), home, home / "tiny-llama", arch="llama")


def train_losses(run_dir: Path) -> list[list[float]]:
    return json.loads((run_dir / "train" / "result.json").read_text())["series"]["train.loss"]


def test_two_process_adapter_verifies_and_matches_one_process(home, model):
    runs = {}
    for nproc in (1, 2):
        spec = write_spec(home / f"nproc{nproc}", str(model), hyperparameters={**HP, "nproc_per_node": nproc})
        proc = tt(home, "run", spec)
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
        runs[nproc] = only_run_dir(home / f"nproc{nproc}")
    log = (runs[2] / "logs" / "train.log").read_text()
    assert "with 2 processes (gloo)" in log
    one, two = train_losses(runs[1]), train_losses(runs[2])
    assert [s for s, _ in one] == [s for s, _ in two]
    for (step, a), (_, b) in zip(one, two):
        assert abs(a - b) <= 1e-3 * max(abs(a), 1e-3), (step, a, b)
    assert json.loads((runs[2] / "report.json").read_text())["metrics"]["train.world_size"] == 2

    listed = json.loads(tt(home, "models", "list", "--json").stdout)
    models = listed["models"] if isinstance(listed, dict) else listed
    model_id = next(m["id"] for m in models if str(runs[2]) in json.dumps(m))
    verified = tt(home, "models", "verify", model_id)
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_sigterm_checkpoints_once_and_another_world_size_is_refused(home, model):
    spec = write_spec(home / "stopped", str(model),
                      hyperparameters={**HP, "n_epochs": 3, "checkpoint_interval_steps": 100, "nproc_per_node": 2})
    env = dict(tt_env(home), TT_HOLD_AT_STEP="5")  # training waits at step 5 for the signal: it cannot end first
    proc = subprocess.Popen([TT_BIN, "run", str(spec)], env=env, cwd=home, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    seen = []
    for line in proc.stdout:  # wait for training to be under way, then stop it
        seen.append(line)
        if line.startswith("train 5/"):
            proc.send_signal(signal.SIGTERM)
            break
    out = "".join(seen) + proc.communicate(timeout=150)[0]
    assert proc.returncode == 130, out
    run_dir = only_run_dir(home / "stopped")
    saved = sorted(p.name for p in (run_dir / "train" / "checkpoints").iterdir())
    assert len(saved) == 1 and saved[0].startswith("step-"), saved  # one checkpoint, taken by rank 0 only
    step = int(saved[0].split("-")[1])

    data = json.loads(spec.read_text())
    data["hyperparameters"]["nproc_per_node"] = 1
    spec.write_text(json.dumps(data))
    refused = tt(home, "run", spec, "--resume", run_dir)
    assert refused.returncode != 0
    assert "written by 2 training process(es)" in refused.stdout + refused.stderr
    assert sorted(p.name for p in (run_dir / "train" / "checkpoints").iterdir()) == saved

    data["hyperparameters"]["nproc_per_node"] = 2
    spec.write_text(json.dumps(data))
    resumed = tt(home, "run", spec, "--resume", run_dir)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert f"resumed from {saved[0]} at step {step}/" in (run_dir / "logs" / "train.log").read_text()
