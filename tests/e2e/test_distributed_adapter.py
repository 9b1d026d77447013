"""Adapter training with 2 processes (torchrun, gloo on CPU) through `tt run`.

The adapter trained by two DistributedDataParallel ranks is registered and `tt models verify`
accepts it; its loss curve matches a 1-process run of the same schedule (LoRA dropout 0), because
each rank computes half of every micro-batch and scales by the global supervised-token count.
SIGTERM reaches both ranks, which stop after the same step with one checkpoint; resuming it with
another world size is refused with a message naming it, and with the same one it completes.

Both tests read the same two runs (module fixtures): the 1-process run, and the 2-process run that is
stopped at step 2 or 3 (TT_HOLD_AT_STEP: it cannot end first), refused, then resumed to the end. Its loss curve,
steps before and after the stop, is the one compared with the 1-process curve, and its adapter is verified.
"""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from adapter_support import TT_BIN, only_run_dir, shared_tiny_model, tt, tt_env, write_spec

HP = {"n_epochs": 2, "batch_size": 8, "max_eval_examples": 4, "checkpoint_interval_steps": 4}
STOP_AT = 2  # the ranks agree on the stop at this step or the next: before the first periodic checkpoint (4)


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("adapter-ddp")


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Iterator[Path]:
    with shared_tiny_model(tmp_path_factory) as model:
        yield model


def train_losses(run_dir: Path) -> list[list[float]]:
    return json.loads((run_dir / "train" / "result.json").read_text())["series"]["train.loss"]


@pytest.fixture(scope="module")
def one_process(home, model) -> Path:
    spec = write_spec(home / "nproc1", str(model), hyperparameters={**HP, "nproc_per_node": 1})
    proc = tt(home, "run", spec)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return only_run_dir(home / "nproc1")


@pytest.fixture(scope="module")
def two_processes(home, model) -> dict:
    """The 2-process run: SIGTERM at step STOP_AT, a resume with 1 process (refused), one with 2 (completes)."""
    spec = write_spec(home / "nproc2", str(model), hyperparameters={**HP, "nproc_per_node": 2})
    env = dict(tt_env(home), TT_HOLD_AT_STEP=str(STOP_AT))  # training waits there for the signal
    proc = subprocess.Popen([TT_BIN, "run", str(spec)], env=env, cwd=home, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    seen = []
    for line in proc.stdout:  # wait for training to be under way, then stop it
        seen.append(line)
        if line.startswith(f"train {STOP_AT}/"):
            proc.send_signal(signal.SIGTERM)
            break
    out = {"stopped": "".join(seen) + proc.communicate(timeout=150)[0], "stopped_code": proc.returncode}
    run_dir = only_run_dir(home / "nproc2")
    out["run_dir"] = run_dir
    out["saved"] = sorted(p.name for p in (run_dir / "train" / "checkpoints").iterdir())

    data = json.loads(spec.read_text())
    data["hyperparameters"]["nproc_per_node"] = 1
    spec.write_text(json.dumps(data))
    out["refused"] = tt(home, "run", spec, "--resume", run_dir)
    out["saved_after_refusal"] = sorted(p.name for p in (run_dir / "train" / "checkpoints").iterdir())

    data["hyperparameters"]["nproc_per_node"] = 2
    spec.write_text(json.dumps(data))
    out["resumed"] = tt(home, "run", spec, "--resume", run_dir)
    return out


def test_two_process_adapter_verifies_and_matches_one_process(home, one_process, two_processes):
    resumed, run_dir = two_processes["resumed"], two_processes["run_dir"]
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    log = (run_dir / "logs" / "train.log").read_text()
    assert "with 2 processes (gloo)" in log
    one, two = train_losses(one_process), train_losses(run_dir)
    assert [s for s, _ in one] == [s for s, _ in two] and len(one) > 2 * STOP_AT, (one, two)
    for (step, a), (_, b) in zip(one, two):
        assert abs(a - b) <= 1e-3 * max(abs(a), 1e-3), (step, a, b)
    assert json.loads((run_dir / "report.json").read_text())["metrics"]["train.world_size"] == 2

    listed = json.loads(tt(home, "models", "list", "--json").stdout)
    models = listed["models"] if isinstance(listed, dict) else listed
    model_id = next(m["id"] for m in models if str(run_dir) in json.dumps(m))
    verified = tt(home, "models", "verify", model_id)
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_sigterm_checkpoints_once_and_another_world_size_is_refused(two_processes):
    assert two_processes["stopped_code"] == 130, two_processes["stopped"]
    saved = two_processes["saved"]
    assert len(saved) == 1 and saved[0].startswith("step-"), saved  # one checkpoint, taken by rank 0 only
    step = int(saved[0].split("-")[1])
    assert STOP_AT <= step < HP["checkpoint_interval_steps"], saved  # the stop's, not a periodic one

    refused = two_processes["refused"]
    assert refused.returncode == 2, (refused.returncode, refused.stdout[-2000:])  # bad input, through torchrun
    assert "written by 2 training process(es)" in refused.stdout + refused.stderr
    assert two_processes["saved_after_refusal"] == saved

    resumed, run_dir = two_processes["resumed"], two_processes["run_dir"]
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert f"resumed from {saved[0]} at step {step}/" in (run_dir / "logs" / "train.log").read_text()
