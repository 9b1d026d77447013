"""An interrupted training resumed from its checkpoint ends exactly where an uninterrupted one does."""

from __future__ import annotations

import json

import torch
from safetensors.torch import load_file

from tt_engine_adapter.testing.harness import sentiment_run

# 24 rows, 8 a step: 3 steps an epoch. The stop comes one step into the third epoch (step 7, after the periodic
# checkpoint at 4), so the resume restores a mid-epoch data order and the dropout RNG; 12 steps cross one more epoch.
HP = {"n_epochs": 50, "max_steps": 12, "batch_size": 4, "gradient_accumulation_steps": 2, "lora_rank": 4,
      "lora_dropout": 0.1, "learning_rate": 3e-3, "max_seq_length": 96, "max_new_tokens": 4,
      "checkpoint_interval_steps": 4, "keep_checkpoints": 2}
STOP_AT = 7


def test_interrupted_training_resumes_to_the_same_weights(tmp_path, tiny_llama):
    straight = sentiment_run(tmp_path / "straight", str(tiny_llama), HP, n_train=24, n_eval=4)
    straight.stage("prepare")
    straight.stage("prefetch")
    broken = sentiment_run(tmp_path / "broken", str(tiny_llama), HP, n_train=24, n_eval=4)
    broken.done = dict(straight.done)  # same prepared rows and base model
    done = straight.stage("train")["result"]

    code, err = broken.stopped_at("train", STOP_AT)
    assert code == 130, err[-2000:]
    checkpoints = sorted((broken.run_dir / "train" / "checkpoints").glob("step-*"))
    assert checkpoints and json.loads((checkpoints[-1] / "meta.json").read_text())["step"] == STOP_AT
    assert not (broken.run_dir / "train" / "adapter").exists()

    resumed = broken.stage("train", resume=True)
    assert any("resumed from step-" in e.get("message", "") for e in resumed["events"])
    result = resumed["result"]
    assert result["metrics"]["train.steps"] == done["metrics"]["train.steps"] == HP["max_steps"]
    assert result["series"]["train.loss"] == done["series"]["train.loss"]
    a = load_file(str(straight.run_dir / "train" / "adapter" / "adapter_model.safetensors"))
    b = load_file(str(broken.run_dir / "train" / "adapter" / "adapter_model.safetensors"))
    assert a.keys() == b.keys() and a
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=1e-5, atol=1e-6)
    # optimizer state and step of the last checkpoint match too
    sa = torch.load(sorted((straight.run_dir / "train/checkpoints").glob("step-*"))[-1] / "optimizer.pt")
    sb = torch.load(sorted((broken.run_dir / "train/checkpoints").glob("step-*"))[-1] / "optimizer.pt")
    for key, state in sa["state"].items():
        torch.testing.assert_close(state["exp_avg"], sb["state"][key]["exp_avg"], rtol=1e-5, atol=1e-7)
        assert int(state["step"]) == int(sb["state"][key]["step"])

    # a checkpoint made with other settings is refused, not silently mixed in
    broken.spec["hyperparameters"]["learning_rate"] = 1e-3  # changes the stage fingerprint
    refused = broken.stage("train", resume=True, check=False)
    assert refused["code"] == 2
    assert any("new run directory" in e.get("message", "") for e in refused["events"])
