"""Sharded (FSDP2) SFT with 2 real processes (torchrun, gloo on CPU) on the tiny Llama, against one process.

Every run here is the real train stage started as the host starts it (`tt_stagekit.launcher.stage_arguments`:
torchrun for 2 processes), on the same prepared rows; the request's fingerprint is held fixed, as the host's is
(plugin.py leaves the world size and the sharding out of the train stage's fingerprint).

- the 2-rank sharded loss trajectory and validation losses (every 4 steps) equal one process's within 1e-5, the
  published adapter (the best step's) is whole (every rank's rows, not rank 0's slice) and equal to one process's, and the parameter + optimizer bytes each rank
  holds (train.sharded_bytes_per_rank) are at most 0.55 of one process's; the node's peak host memory
  (train.peak_host_bytes_per_node) is both ranks' together;
- a one-process checkpoint resumes on 2 sharded ranks, and one written by 2 sharded ranks on 1 unsharded
  process, each to the same losses and final adapter as the uninterrupted one-process run;
- that last checkpoint is what is left after one rank is SIGKILLed while the next one is gathered (rank 1 is in
  the gather of step 4's checkpoint, rank 0 held before it by TT_HOLD_AT_STEP): the run fails, step 4's
  checkpoint is not there, and the resume ends at the one-process adapter.

- the meta-device base before sharding (in this process): a tied head stays tied, the LoRA tensors are one
  process's, the rotary tables real.

Cost: 5 train stages of 8 steps or fewer (3 with 2 processes) and a prepare, about 2.5 minutes on 2 busy cores.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tt_engine_adapter.testing.harness import MODULES, sentiment_run
from tt_stagekit.launcher import stage_arguments

HP = {"n_epochs": 2, "batch_size": 8, "lora_rank": 4, "lora_dropout": 0.0, "learning_rate": 3e-3,
      "max_seq_length": 96, "max_new_tokens": 4, "checkpoint_interval_steps": 2, "keep_checkpoints": 5,
      "precision": "fp32", "eval_interval_steps": 4}  # 32 rows: 4 steps an epoch, 8 in all; validation at 4 and 8
SHARDED = {"nproc_per_node": 2, "sharding": "fsdp"}
FINGERPRINT = "f" * 64  # the host's fingerprint does not depend on the world size or the sharding
STOP_AT = 4


def _request(run, resume: bool) -> Path:
    path = run.request("train", resume)
    request = json.loads(path.read_text())
    request["fingerprint"] = FINGERPRINT
    path.write_text(json.dumps(request))
    return path


def start(run, resume: bool = False, env: dict | None = None) -> subprocess.Popen:
    command = [sys.executable, *stage_arguments(run.spec["hyperparameters"], MODULES["train"]), str(_request(run, resume))]
    return subprocess.Popen(command, cwd=run.run_dir, env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def train(run, resume: bool = False, check: bool = True) -> dict:
    proc = start(run, resume)
    out, err = proc.communicate(timeout=600)
    return run.finish("train", proc.returncode, out, err, check)


def hold(run, step: int) -> subprocess.Popen:
    """The stage started with TT_HOLD_AT_STEP: rank 0 waits after reporting `step` (the other rank goes on to the
    checkpoint of that step and waits there, in its gather), until a stop is requested."""
    proc = start(run, env={"TT_HOLD_AT_STEP": str(step)})
    for line in proc.stdout:
        event = json.loads(line) if line.startswith("{") else {}
        if event.get("type") == "progress" and event.get("step", 0) >= step:
            return proc
    raise AssertionError(f"the stage ended before step {step}: {proc.communicate()[1][-3000:]}")


def adapter(run) -> dict:
    return load_file(str(run.run_dir / "train" / "adapter" / "adapter_model.safetensors"))


def assert_same_adapter(a: dict, b: dict, tolerance: float) -> None:
    assert a.keys() == b.keys() and a
    for key in a:
        assert a[key].shape == b[key].shape, (key, a[key].shape, b[key].shape)
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=tolerance)


def assert_same_losses(a: dict, b: dict, tolerance: float = 1e-5) -> None:
    one, two = a["series"]["train.loss"], b["series"]["train.loss"]
    assert [s for s, _ in one] == [s for s, _ in two] and len(one) == 8, (one, two)
    for (step, x), (_, y) in zip(one, two):
        assert abs(x - y) <= tolerance, (step, x, y)


def new_run(tmp_path: Path, name: str, tiny_llama, prepared: dict, **hp):
    run = sentiment_run(tmp_path / name, str(tiny_llama), {**HP, **hp}, n_train=32, n_eval=4)
    run.done = dict(prepared)
    return run


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_llama) -> dict:
    """The one-process run and the uninterrupted 2-rank sharded run, on the same prepared rows."""
    tmp = tmp_path_factory.mktemp("sharded")
    one = sentiment_run(tmp / "one", str(tiny_llama), HP, n_train=32, n_eval=4)
    from tt_engine_adapter.testing.tiny_model import sentiment_examples

    validation = tmp / "validation.jsonl"
    validation.write_text("".join(json.dumps({"id": f"val-{i}", "messages": [
        {"role": "system", "content": one.system}, {"role": "user", "content": e["input"]},
        {"role": "assistant", "content": e["output"]}]}) + "\n" for i, e in enumerate(sentiment_examples(48, 99)[-8:])))
    one.spec["datasets"] = {"train": None, "validation": str(validation), "test": None}
    one.stage("prepare")
    one.stage("prefetch")
    prepared = dict(one.done)
    out = {"tmp": tmp, "prepared": prepared, "one": one, "one_result": train(one)["result"]}
    two = new_run(tmp, "two", tiny_llama, prepared, **SHARDED)
    out["two"], out["two_result"] = two, train(two)["result"]
    return out


def test_two_sharded_ranks_train_as_one_process_with_half_the_memory_each(runs):
    one, two = runs["one_result"], runs["two_result"]
    assert_same_losses(one, two)
    # validation during training (every rank joins the forward) and the best step's adapter, gathered whole
    assert [s for s, _ in two["series"]["train.validation_loss"]] == [4, 8]
    for (_, x), (_, y) in zip(one["series"]["train.validation_loss"], two["series"]["train.validation_loss"]):
        assert abs(x - y) <= 1e-5, (x, y)
    assert one["metrics"]["train.best_step"] == two["metrics"]["train.best_step"]
    assert two["metrics"]["train.world_size"] == 2 and one["metrics"]["train.world_size"] == 1
    held_one, held_two = one["metrics"]["train.sharded_bytes_per_rank"], two["metrics"]["train.sharded_bytes_per_rank"]
    assert held_two <= 0.55 * held_one, (held_two, held_one)
    # the node's figure sums its ranks' peak resident sets: more than half of one process's (each sharded rank
    # holds torch, its half of the weights and its activations; measured here: 2 × ~0.87 GB against 2.29 GB for
    # one process, where rank 0's alone would be ~0.87 GB)
    peak_one, peak_two = one["metrics"]["train.peak_host_bytes_per_node"], two["metrics"]["train.peak_host_bytes_per_node"]
    assert peak_two > 0.5 * peak_one > 0, (peak_two, peak_one)
    # the published adapter holds every rank's rows: whole tensors, equal to one process's
    assert_same_adapter(adapter(runs["one"]), adapter(runs["two"]), 1e-5)
    print(f"\n2 sharded ranks vs 1 process: largest loss difference "
          f"{max(abs(x - y) for (_, x), (_, y) in zip(one['series']['train.loss'], two['series']['train.loss'])):.2e}, "
          f"bytes per rank {two['metrics']['train.sharded_bytes_per_rank']} / "
          f"{one['metrics']['train.sharded_bytes_per_rank']}, largest adapter difference "
          f"{max(float((a - b).abs().max()) for a, b in zip(adapter(runs['one']).values(), adapter(runs['two']).values())):.2e}")
    log = (runs["two"].run_dir / "train" / "result.json").read_text()
    assert json.loads(log)["metrics"]["train.steps"] == 8


def test_a_one_process_checkpoint_resumes_on_two_sharded_ranks(runs, tiny_llama):
    run = new_run(runs["tmp"], "one-then-two", tiny_llama, runs["prepared"], **SHARDED)
    shutil.copytree(runs["one"].run_dir / "train" / "checkpoints" / f"step-{6:09d}",
                    run.run_dir / "train" / "checkpoints" / f"step-{6:09d}")
    resumed = train(run, resume=True)
    assert any("resumed from step-000000006" in e.get("message", "") for e in resumed["events"])
    assert_same_losses(runs["one_result"], resumed["result"])
    assert_same_adapter(adapter(runs["one"]), adapter(run), 1e-5)


def _rank_pid(launcher: int, rank: int) -> int:
    """The pid of the torchrun worker with RANK=`rank` among the launcher's descendants (workers run in sessions
    of their own)."""
    for _ in range(200):
        parent, environ = {}, {}
        for entry in Path("/proc").iterdir():
            try:
                parent[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                environ[int(entry.name)] = (entry / "environ").read_bytes().split(b"\0")
            except (OSError, ValueError):
                continue
        for pid, env in environ.items():
            ancestor = parent.get(pid)
            while ancestor not in (None, 0, 1, launcher):
                ancestor = parent.get(ancestor)
            if ancestor == launcher and f"RANK={rank}".encode() in env and b"LOCAL_RANK=%d" % rank in env:
                return pid
        time.sleep(0.05)
    raise AssertionError(f"no rank {rank} under {launcher}")


def test_a_rank_killed_at_a_checkpoint_write_resumes_on_one_unsharded_process(runs, tiny_llama):
    run = new_run(runs["tmp"], "killed", tiny_llama, runs["prepared"], **SHARDED)
    proc = hold(run, STOP_AT)  # rank 1 is in the gather of step 4's checkpoint, rank 0 held before it
    os.kill(_rank_pid(proc.pid, 1), signal.SIGKILL)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode not in (0, 130), err[-3000:]
    saved = sorted(p.name for p in (run.run_dir / "train" / "checkpoints").glob("step-*"))
    assert saved == ["step-000000002"], saved  # step 4's never published
    gathered = load_file(str(run.run_dir / "train" / "checkpoints" / saved[0] / "adapter.safetensors"))
    alone = load_file(str(runs["one"].run_dir / "train" / "checkpoints" / saved[0] / "adapter.safetensors"))
    assert_same_adapter(alone, gathered, 1e-6)  # whole tensors from both ranks, as one process saves them
    run.spec["hyperparameters"].update(nproc_per_node=1, sharding="none")  # 2 sharded ranks wrote it
    resumed = train(run, resume=True)
    assert any("resumed from step-000000002" in e.get("message", "") for e in resumed["events"])
    assert_same_losses(runs["one_result"], resumed["result"])
    assert_same_adapter(adapter(runs["one"]), adapter(run), 1e-5)


def test_another_world_size_needs_dropout_free_training_and_a_sharded_side():
    from tt_engine_adapter.runtime.distributed_checkpoint import world_size_refusal

    where = Path("step-000000002")
    assert world_size_refusal(where, 2, 2, False, False) is None  # the same world size: always
    assert world_size_refusal(where, 2, 1, True, True) is None  # lora_dropout 0, sharded run or checkpoint
    for any_world_size, sharded in ((False, True), (True, False), (False, False)):
        refusal = world_size_refusal(where, 2, 1, any_world_size, sharded)
        assert refusal and "written by 2 training process(es)" in refusal and "nproc_per_node" in refusal


def test_the_meta_base_has_one_parameter_per_weight_and_real_lora_and_buffers(tmp_path, tiny_llama):
    """Before sharding (no process group): a tied head is one parameter with the embeddings (as from_pretrained
    has it), every base parameter is on the meta device and named in the weights files, the LoRA tensors and the
    rotary tables are real, and the LoRA ones are those one process draws with the same seed."""
    from tt_engine_adapter.runtime import model_source, sharded_load
    from tt_engine_adapter.runtime.config import AdapterSettings
    from tt_engine_adapter.runtime.train import wrap_lora

    tied = tmp_path / "tied"
    shutil.copytree(tiny_llama, tied)
    config = json.loads((tied / "config.json").read_text())
    (tied / "config.json").write_text(json.dumps({**config, "tie_word_embeddings": True}))
    hp = AdapterSettings(lora_rank=4, lora_dropout=0.0)
    torch.manual_seed(hp.seed)
    model, lora, buffers = sharded_load.build(str(tied), torch.float32, hp)
    inner = model.base_model.model
    assert inner.lm_head.weight is inner.model.embed_tokens.weight
    files = sharded_load.weight_files(tied)
    base = [(name, p) for name, p in model.named_parameters() if not p.requires_grad]
    assert base and all(p.is_meta and sharded_load.checkpoint_name(name) in files for name, p in base)
    assert lora and all(not t.is_meta for t in lora.values())
    assert any("rotary" in name for name in buffers) and all(torch.isfinite(b).all() for b in buffers.values())
    torch.manual_seed(hp.seed)
    alone = wrap_lora(model_source.load_model(str(tied), "cpu", torch.float32), hp)
    expected = {n: p for n, p in alone.named_parameters() if p.requires_grad}
    assert expected.keys() == lora.keys() and all(torch.equal(expected[n], lora[n]) for n in lora)
