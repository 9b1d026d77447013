"""Adapter training with 2 processes (torchrun, gloo on CPU) through `tt run` (issue 6, item 3).

The adapter trained by two DistributedDataParallel ranks is registered and `tt models verify`
accepts it; its loss curve matches a 1-process run of the same schedule (LoRA dropout 0), because
each rank computes half of every micro-batch and scales by the global supervised-token count.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adapter_support import build_tiny_model, engine_python, only_run_dir, tt, write_spec

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
