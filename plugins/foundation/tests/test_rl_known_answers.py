"""RL on cases with a known answer: the group-mean baseline, the reward, and the direction of one policy step."""

from __future__ import annotations

import pytest
import torch

from tt_engine_foundation.runtime.chat import reward
from tt_engine_foundation.runtime.model import GPT, config_for_depth
from tt_engine_foundation.runtime.rl import group_advantages, policy_loss


def test_group_baseline_is_each_prompts_own_mean():
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0,   1.0, 1.0, 1.0, 1.0,   0.0, 1.0, 0.0, 1.0])
    expected = torch.tensor([0.75, -0.25, -0.25, -0.25,   0.0, 0.0, 0.0, 0.0,   -0.5, 0.5, -0.5, 0.5])
    assert torch.equal(group_advantages(rewards, 4), expected)
    # a group that all succeeded (or all failed) teaches nothing: zero advantage, so no update is made
    assert not bool((group_advantages(torch.ones(8), 4) != 0).any())


@pytest.mark.parametrize("prediction, reference, expected", [
    ("12", "12", 1.0), ("The sum is 12.", "12", 1.0), ("12 or 13", "12", 0.0), ("twelve", "12", 0.0),
    ("  Positive! ", "positive", 1.0), ("very positive", "positive", 0.0), ("negative", "positive", 0.0),
])
def test_reward_on_known_answers(prediction, reference, expected):
    assert reward(prediction, reference) == expected


def _logp(model, prompt, sample) -> float:
    ids = torch.tensor([prompt + sample])
    with torch.no_grad():
        logits = model(ids[:, :-1]).float()
    logp = torch.log_softmax(logits, dim=-1)[0, len(prompt) - 1:].gather(1, ids[0, len(prompt):, None])
    return float(logp.sum())


def test_one_step_raises_the_rewarded_answer_and_lowers_the_other():
    torch.manual_seed(0)
    model = GPT(config_for_depth(1, 40, 16))
    model.init_weights(0)
    prompt, good, bad = [3, 4, 5], [7, 8, 2], [9, 10, 2]
    before = _logp(model, prompt, good), _logp(model, prompt, bad)
    advantage = group_advantages(torch.tensor([1.0, 0.0]), 2)  # +0.5 for the right answer, -0.5 for the wrong
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    loss = policy_loss(model, [prompt, prompt], [good, bad], advantage, 1, torch.device("cpu"), None)
    # the loss is minus the advantage-weighted log-likelihood per sampled token
    assert float(loss.detach()) == pytest.approx(-(0.5 * before[0] - 0.5 * before[1]) / 6, rel=1e-4)
    loss.backward()
    optimizer.step()
    after = _logp(model, prompt, good), _logp(model, prompt, bad)
    assert after[0] > before[0] and after[1] < before[1]
