"""The adapter's checkpoints are read with `weights_only=True`: a tampered `rng.pt` or `optimizer.pt` (its
sha256 in meta.json can be forged beside it) never runs code, it is refused; RNG states still round-trip."""

from __future__ import annotations

import os
import random

import pytest
import torch

from tt_engine_adapter.runtime import checkpoint
from tt_stagekit.protocol import InvalidInput


class Payload:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return os.mkdir, (self.marker,)  # what an attacker's pickle would run on load


def test_a_pickle_that_runs_code_is_refused_not_run(tmp_path):
    marker = tmp_path / "code-ran"
    torch.save({"world_size": 1, "torch": Payload(str(marker))}, tmp_path / "rng.pt")
    with pytest.raises(InvalidInput, match="holds more than tensors and plain data"):
        checkpoint.saved_world_size(tmp_path)
    torch.save({"state": Payload(str(marker))}, tmp_path / "optimizer.pt")
    with pytest.raises(InvalidInput, match="holds more than tensors and plain data"):
        checkpoint.load_plain(tmp_path / "optimizer.pt")
    assert not marker.exists()


def test_rng_and_optimizer_state_round_trip(tmp_path):
    torch.manual_seed(1)
    random.seed(2)
    layer = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(layer.parameters(), lr=0.1)
    layer(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    torch.save(optimizer.state_dict(), tmp_path / "optimizer.pt")
    rng = checkpoint.rng_state()
    torch.save({**rng, "ranks": [rng], "world_size": 1}, tmp_path / "rng.pt")
    expected = (torch.rand(3), random.random())
    checkpoint.set_rng(checkpoint.load_plain(tmp_path / "rng.pt"))
    assert torch.equal(torch.rand(3), expected[0]) and random.random() == expected[1]
    fresh = torch.optim.AdamW(layer.parameters(), lr=0.1)
    fresh.load_state_dict(checkpoint.load_plain(tmp_path / "optimizer.pt"))
    assert torch.equal(fresh.state_dict()["state"][0]["exp_avg"], optimizer.state_dict()["state"][0]["exp_avg"])
    assert checkpoint.saved_world_size(tmp_path) == 1


def _scaled_training(model_dir, rows, checkpoint_dir, resume, max_steps):
    """LoRA training on CPU with a GradScaler (fp32 compute: the scaler still scales, unscales and grows)."""
    import dataclasses

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tt_engine_adapter.runtime import chat
    from tt_engine_adapter.runtime import train as loop
    from tt_engine_adapter.runtime.config import AdapterSettings
    from tt_engine_adapter.runtime.data import encode_rows

    hp = AdapterSettings(n_epochs=1, learning_rate=2e-3, batch_size=2, lora_rank=4, lora_alpha=8.0,
                         lora_dropout=0.0, max_seq_length=128, warmup_ratio=0.0, lr_scheduler="constant", seed=3,
                         checkpoint_interval_steps=2, keep_checkpoints=1)
    hp = dataclasses.replace(hp, max_steps=max_steps)
    tok = AutoTokenizer.from_pretrained(model_dir)
    torch.manual_seed(0)
    model = loop.wrap_lora(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32), hp)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 16, growth_interval=1)  # grows every step
    loop.train(model, encode_rows(tok, rows, hp.max_seq_length), hp, pad_id=chat.pad_token_id(tok), device="cpu",
               autocast_dtype=None, checkpoint_dir=checkpoint_dir, stage_fingerprint="scaler", resume=resume,
               scaler=scaler)
    return model, scaler


def test_gradient_scaler_state_is_checkpointed_and_restored(tmp_path, tiny_llama):
    """An fp16 run's GradScaler (scale, growth tracker) is saved with each checkpoint as plain data and restored on
    resume, so a resumed run's scaler and weights equal an uninterrupted run's."""
    from tt_engine_adapter.testing.tiny_model import sentiment_examples

    rows = [{"id": f"r{i}", "messages": [{"role": "user", "content": e["input"]},
                                         {"role": "assistant", "content": e["output"]}]}
            for i, e in enumerate(sentiment_examples(8, seed=1))]
    straight, straight_scaler = _scaled_training(tiny_llama, rows, tmp_path / "a", False, 4)
    _scaled_training(tiny_llama, rows, tmp_path / "b", False, 3)  # leaves its step-2 checkpoint: the interrupted run
    saved = checkpoint.load_plain(tmp_path / "b" / "step-000000002" / "scaler.pt")  # weights_only=True
    assert saved["scale"] == 2.0 ** 18 and saved["growth_interval"] == 1
    resumed, resumed_scaler = _scaled_training(tiny_llama, rows, tmp_path / "b", True, 4)
    assert resumed_scaler.state_dict() == straight_scaler.state_dict()
    assert straight_scaler.state_dict()["scale"] == 2.0 ** 20
    a = {n: p for n, p in straight.named_parameters() if p.requires_grad}
    b = {n: p for n, p in resumed.named_parameters() if p.requires_grad}
    for name, tensor in a.items():
        assert torch.equal(tensor, b[name]), name
