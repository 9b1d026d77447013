"""The fused cross-entropy equals `F.cross_entropy` in value and gradient, chunked or not."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tt_engine_foundation.runtime import loss as loss_module


@pytest.mark.parametrize("chunk_bytes", [8 * 8, 8 * 50 * 7, 2 << 20])  # 1-row, 7-row (uneven), whole tensor
@pytest.mark.parametrize("upstream", [1.0, 0.25])
def test_value_and_gradient_match_torch(monkeypatch, chunk_bytes, upstream):
    monkeypatch.setattr(loss_module, "CPU_CHUNK_BYTES", chunk_bytes)
    gen = torch.Generator().manual_seed(0)
    base = torch.randn(23, 50, generator=gen, dtype=torch.float64) * 4
    targets = torch.randint(0, 50, (23,), generator=gen)
    targets[[2, 9, 17]] = -100  # ignored rows

    expected_in = base.clone().requires_grad_(True)
    expected = F.cross_entropy(expected_in, targets, ignore_index=-100)
    (expected * upstream).backward()

    ours_leaf = base.clone().requires_grad_(True)
    ours = loss_module.cross_entropy(ours_leaf * 1.0, targets)  # a non-leaf, like lm_head's output
    (ours * upstream).backward()

    assert torch.allclose(ours, expected, rtol=0, atol=1e-12)
    assert torch.allclose(ours_leaf.grad, expected_in.grad, rtol=0, atol=1e-15)
    assert torch.all(ours_leaf.grad[[2, 9, 17]] == 0)


def test_all_targets_ignored_gives_zero_loss_and_gradient():
    logits = torch.randn(4, 10, dtype=torch.float64, requires_grad=True)
    out = loss_module.cross_entropy(logits * 1.0, torch.full((4,), -100))
    out.backward()
    assert float(out.detach()) == 0.0 and torch.count_nonzero(logits.grad) == 0


def test_without_grad_it_is_torch_cross_entropy_and_leaves_logits_alone():
    logits = torch.randn(6, 10)
    before = logits.clone()
    targets = torch.randint(0, 10, (6,))
    assert torch.equal(loss_module.cross_entropy(logits, targets), F.cross_entropy(logits, targets))
    assert torch.equal(logits, before)
