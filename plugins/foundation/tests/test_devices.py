"""tt_stagekit.devices.pick_device, which both engines and `tt serve` use to choose a device."""

from __future__ import annotations

import pytest
import torch

from tt_stagekit.devices import pick_device
from tt_stagekit.protocol import InvalidInput


def test_auto_and_cpu():
    expected = "cuda" if torch.cuda.is_available() else ("mps" if torch.backends.mps.is_available() else "cpu")
    assert pick_device("auto") == pick_device(None) == expected
    assert pick_device("cpu") == "cpu"


def test_unknown_device_names_the_choices():
    with pytest.raises(InvalidInput, match=r"'tpu' is not one of auto, cpu, cuda, mps"):
        pick_device("tpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_missing_cuda_is_invalid_input_with_a_next_step():
    with pytest.raises(InvalidInput, match="sees no CUDA device; run `tt doctor`"):
        pick_device("cuda")
