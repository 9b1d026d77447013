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
