"""Logits only where the loss reads them: SFT's chat loss and RL's policy log-probs, computed with the head on the
supervised positions alone (GPT.forward's `where`), equal the full-logits path in loss and every parameter's
gradient within 1e-6 (float32, CPU) on a fixed batch of rows of different lengths (padding), prompts and answers.

The full-logits path is written out here as it was before (every position's logits, then the loss reads the
supervised ones through ignore_index / a zero weight), so the comparison is with the plain computation."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tt_engine_foundation.runtime.model import GPT, config_for_depth
from tt_engine_foundation.runtime.rl import policy_loss
from tt_engine_foundation.runtime.sft import IGNORE, collate, supervised_loss

VOCAB, PAD = 301, 1
TOLERANCE = 1e-6
CPU = torch.device("cpu")


def model(gradient_checkpointing: bool = False) -> GPT:
    """Depth 2, every weight non-trivial (init zeroes the residual outputs and nearly the head)."""
    torch.manual_seed(0)
    net = GPT(config_for_depth(2, VOCAB, 64))
    net.init_weights(3)
    with torch.no_grad():
        for i, p in enumerate(net.parameters()):
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(i)) * 0.05)
    net.gradient_checkpointing = gradient_checkpointing
    return net.train()


def chat_rows() -> list[tuple[list[int], list[int]]]:
    """(ids, mask) rows as sft.build_examples makes them: a prompt (unsupervised), an answer (supervised),
    lengths 9 to 23 so collate pads all but the longest; one row has two answers (a two-turn chat)."""
    g = torch.Generator().manual_seed(7)
    rows = []
    for prompt, answer in ((6, 3), (14, 9), (4, 5), (9, 1)):
        ids = torch.randint(8, VOCAB, (prompt + answer,), generator=g).tolist()
        rows.append((ids, [0] * prompt + [1] * answer))
    ids = torch.randint(8, VOCAB, (20,), generator=g).tolist()
    rows.append((ids, [0] * 5 + [1] * 4 + [0] * 6 + [1] * 5))
    return rows


def gradients(net: GPT) -> dict[str, torch.Tensor]:
    out = {name: p.grad.detach().clone() for name, p in net.named_parameters()}
    net.zero_grad(set_to_none=True)
    return out


def assert_equal(ours: tuple, full: tuple) -> None:
    (loss, grads), (loss_full, grads_full) = ours, full
    assert abs(float(loss) - float(loss_full)) <= TOLERANCE, (float(loss), float(loss_full))
    assert grads.keys() == grads_full.keys()
    for name, g in grads_full.items():
        assert g.abs().max() > 0, f"{name}: no gradient to compare"  # the batch reaches every weight
        diff = float((grads[name] - g).abs().max())
        # within 1e-6, and within 1e-5 of the tensor's largest entry (these gradients are small: 0.005 to 0.2)
        assert diff <= TOLERANCE and diff <= 10 * TOLERANCE * float(g.abs().max()), f"{name}: differ by {diff:.3g}"


def test_the_head_at_a_mask_gives_full_logits_rows_in_row_major_order():
    net = model().eval()
    x, y = collate(chat_rows(), PAD)
    where = y != IGNORE
    with torch.no_grad():
        full, picked = net(x), net(x, where=where)
    assert picked.shape == (int(where.sum()), VOCAB)
    assert float((picked - full[where]).abs().max()) <= TOLERANCE


@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("checkpointing", [False, True])
def test_sft_loss_and_gradients_equal_the_full_logits_path(reduction, checkpointing):
    x, y = collate(chat_rows(), PAD)
    assert (y == IGNORE).any() and (y != IGNORE).any() and (x == PAD).any()  # masked, supervised and padding
    net = model(checkpointing)
    loss = supervised_loss(net, x, y, None, reduction=reduction)
    loss.backward()
    ours = (loss.detach(), gradients(net))
    logits = net(x)  # the full-logits path: every position's logits, the loss reads the supervised ones
    full = F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1), ignore_index=IGNORE, reduction=reduction)
    full.backward()
    assert_equal(ours, (full.detach(), gradients(net)))


def test_a_rank_with_no_supervised_row_still_reaches_every_weight_with_zero():
    """sft._rank_loss: a rank with more ranks than rows scores one row with every target ignored; its sum is 0
    and every weight gets a zero gradient (DistributedDataParallel's all-reduce waits for each one)."""
    x, y = collate(chat_rows()[:1], PAD)
    y.fill_(IGNORE)
    net = model()
    loss = supervised_loss(net, x, y, None, reduction="sum")
    loss.backward()
    assert float(loss.detach()) == 0.0
    for name, p in net.named_parameters():
        assert p.grad is not None and not p.grad.any(), name


def test_rl_policy_loss_and_gradients_equal_the_full_logits_path():
    g = torch.Generator().manual_seed(11)
    prompts = [torch.randint(8, VOCAB, (n,), generator=g).tolist() for n in (7, 7, 12, 12, 4, 4)]
    samples = [torch.randint(8, VOCAB, (n,), generator=g).tolist() for n in (5, 2, 9, 3, 1, 6)]
    advantage = torch.tensor([0.5, -0.5, 0.25, -0.25, 0.0, 0.0])  # a group with zero advantage adds nothing
    net = model()
    loss = policy_loss(net, prompts, samples, advantage, PAD, CPU, None)
    loss.backward()
    ours = (loss.detach(), gradients(net))
    full = full_policy_loss(net, prompts, samples, advantage)
    full.backward()
    assert_equal(ours, (full.detach(), gradients(net)))


def full_policy_loss(net, prompts, samples, advantage) -> torch.Tensor:
    """rl.policy_loss before: every position's log-probability, prompts and padding weighted by zero."""
    seqs = [p + s for p, s in zip(prompts, samples)]
    width = max(len(s) for s in seqs) - 1
    x = torch.full((len(seqs), width), PAD, dtype=torch.long)
    y = torch.full((len(seqs), width), PAD, dtype=torch.long)
    weight = torch.zeros((len(seqs), width))
    for b, (prompt, full) in enumerate(zip(prompts, seqs)):
        x[b, :len(full) - 1], y[b, :len(full) - 1] = torch.tensor(full[:-1]), torch.tensor(full[1:])
        weight[b, len(prompt) - 1:len(full) - 1] = float(advantage[b])
    logits = net(x)
    logp = -F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1), reduction="none").view_as(weight)
    return -(logp * weight).sum() / sum(len(s) for s in samples)
