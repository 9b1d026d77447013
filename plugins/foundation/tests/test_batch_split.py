"""A pretraining step's loss and update are the mean over every scored target of its global batch, however the
batch is split into forwards.

Here the split is gradient accumulation in one process; torchrun's ranks split a batch the same way
(runtime/sharding.py), and tests/e2e/test_distributed_foundation.py runs them. Packed rows end in padding,
which scores nothing, so forwards score different numbers of targets: a plain mean of the forwards' means
would count a token of a short row more than a token of a full one, and the world size would change
training.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tt_engine_foundation.runtime import packing
from tt_engine_foundation.runtime.config import FoundationSettings, pretrain_learning_rate
from tt_engine_foundation.runtime.model import config_for_depth
from tt_engine_foundation.runtime.pretrain import run_pretraining

BOS, PAD, VOCAB, SEQ, STEPS = 0, 1, 64, 16, 6
TOLERANCE = 1e-5  # relative: only the float summation order differs between the splits


def documents(seed: int = 0) -> np.ndarray:
    """BOS-led documents of mixed lengths, half of them a repeated pattern a tiny model learns in a few steps
    and half random ids it cannot, so rows differ both in how much they score and in their loss."""
    rng = np.random.default_rng(seed)
    parts = []
    for i in range(60):
        n = int(rng.integers(3, 40))
        body = (np.arange(n - 1) % (2 + i % 5) + 2) if i % 2 else rng.integers(2, VOCAB, n - 1)
        parts.append(np.concatenate(([BOS], body)))
    return np.concatenate(parts).astype(np.uint16)


def train(tmp_path, batch: int, accum: int) -> tuple[list[float], dict[str, torch.Tensor]]:
    cfg = FoundationSettings(depth=1, vocab_size=VOCAB, sequence_length=SEQ, batch_size=batch,
                             gradient_accumulation_steps=accum, pretrain_steps=STEPS, warmup_steps=1,
                             checkpoint_interval_steps=0, checkpoint_interval_seconds=0, log_interval_steps=STEPS,
                             seed=3, device="cpu", bf16=False)
    tokens = documents()
    folder = tmp_path / f"b{batch}x{accum}"
    model, _, figures = run_pretraining(
        cfg=cfg, model_cfg=config_for_depth(1, VOCAB, SEQ, bos_token_id=BOS, eos_token_id=BOS, pad_token_id=PAD),
        tokens=tokens, device=torch.device("cpu"), peak_lr=pretrain_learning_rate(cfg), config={"test": 1},
        fingerprint="batch-split", checkpoint_dir=folder / "checkpoints", backup_dir=None,
        heartbeat_path=folder / "beats.jsonl", packing_table=packing.plan(tokens, BOS, SEQ + 1))
    return [loss for _, loss in figures["losses"]], model.state_dict()


def test_padding_varies_between_the_forwards_of_a_step():
    tokens = documents()
    rows = packing.PackedRows(tokens, packing.plan(tokens, BOS, SEQ + 1), SEQ + 1, BOS, PAD, seed=3)
    scored = {rows.targets(start, 2) for start in range(0, 8 * STEPS, 2)}
    assert len(scored) > 3, scored  # else the splits below would agree under any weighting


@pytest.fixture(scope="module")
def one_forward(tmp_path_factory):
    """Each step's 8 rows in one forward."""
    return train(tmp_path_factory.mktemp("whole"), 8, 1)


@pytest.mark.parametrize("batch, accum", [(2, 4), (1, 8)])
def test_a_step_is_the_same_whatever_the_forwards(tmp_path, one_forward, batch, accum):
    whole, weights = one_forward
    split, split_weights = train(tmp_path, batch, accum)
    for step, (a, b) in enumerate(zip(whole, split), 1):
        assert abs(a - b) <= TOLERANCE * abs(a), (step, a, b)
    # atol: the rounding of a different summation order moves a few weights by ~2e-5 on some CPUs (one
    # embedding entry of 4,096, seen on AVX-512: AdamW's normalised step carries a nearly cancelled
    # gradient's rounding through); a wrong weighting of the forwards moves the losses above, by far more
    for name, value in weights.items():
        assert torch.allclose(split_weights[name], value, rtol=1e-4, atol=1e-4), name
