"""Checkpoints hold tensors and plain data only and are read with `weights_only=True`: a tampered
`trainer-state.pt` or `optimizer.pt` (its sha256 can be forged beside it) never runs code, it is refused;
the RNG states (torch, numpy, python) still round-trip exactly through a saved file."""

from __future__ import annotations

import os
import random

import numpy as np
import pytest
import torch

from tt_engine_foundation.runtime import checkpoints as ckpt
from tt_stagekit.protocol import InvalidInput


class Payload:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return os.mkdir, (self.marker,)  # what an attacker's pickle would run on load


@pytest.mark.parametrize("name", ["trainer-state.pt", "optimizer.pt"])
def test_a_pickle_that_runs_code_is_refused_not_run(tmp_path, name):
    marker = tmp_path / "code-ran"
    folder = tmp_path / "step-000000004"
    folder.mkdir()
    torch.save({"rng": Payload(str(marker)), "counters": {}}, folder / name)
    with pytest.raises(InvalidInput, match="holds more than tensors and plain data"):
        if name == "trainer-state.pt":
            ckpt.read_trainer(folder)
        else:
            ckpt.load_plain(folder / name)
    assert not marker.exists()


def test_rng_states_round_trip_through_a_weights_only_file(tmp_path):
    torch.manual_seed(3)
    np.random.seed(4)
    random.seed(5)
    np.random.standard_normal()  # a cached gaussian in numpy's state
    torch.save({"rng": ckpt.rng_state()}, tmp_path / "state.pt")
    expected = (torch.rand(4), np.random.standard_normal(3), np.random.rand(2), random.random())
    torch.rand(9), np.random.rand(9), random.random()  # move every generator on
    saved = torch.load(tmp_path / "state.pt", map_location="cpu", weights_only=True)
    ckpt.set_rng_state(saved["rng"])
    again = (torch.rand(4), np.random.standard_normal(3), np.random.rand(2), random.random())
    assert torch.equal(expected[0], again[0]) and np.array_equal(expected[1], again[1])
    assert np.array_equal(expected[2], again[2]) and expected[3] == again[3]
