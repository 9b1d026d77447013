"""Logits only where the loss reads them (runtime/logits.py), on the real base (SmolLM2-135M-Instruct, 49,152
vocabulary columns, LoRA with rsLoRA on every linear layer): the SFT loss, the preference completion log-probs and
GRPO's answer log-probs equal the full-logits path, and their LoRA gradients too, within 1e-5 on a fixed batch
(GRPO's gradients 5e-5);
and the head really ran on the labelled positions alone. The shared prefix (runtime/prefix.py) gives the unshared
loss and gradients for SFT and GRPO (its cached-prefix layout here; the prefix tree in tests/test_prefix_tree.py).
One model load (module fixture); about a minute of CPU on a quiet machine.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from tt_engine_adapter.runtime import batches, chat
from tt_engine_adapter.runtime.logits import token_loss_sum
from tt_engine_adapter.runtime.prefix import Sharing, shared
from tt_engine_adapter.runtime.preference.logps import collate as pref_collate, completion_logps
from tt_engine_adapter.runtime.reinforcement import grpo
from review_lora_support import off, review_lora

@pytest.fixture(scope="module")
def lora(real_base):
    return review_lora(real_base, seed=0)


def _grads(model) -> list:
    out = [p.grad.detach().clone() for p in model.parameters() if p.requires_grad]
    model.zero_grad(set_to_none=True)
    return out


_off = off


def _close(a: list, b: list) -> float:
    """`_off` over every LoRA gradient at once (relative to the largest of them)."""
    return _off(torch.cat([x.flatten() for x in a]), torch.cat([y.flatten() for y in b]))


def _head_widths(model, run):
    widths = []
    handle = model.get_output_embeddings().register_forward_hook(lambda m, a, o: widths.append(tuple(a[0].shape[:2])))
    try:
        value = run()
    finally:
        handle.remove()
    return value, widths


@pytest.mark.parametrize("packing", [False, True])
def test_the_sft_loss_and_gradients_equal_the_full_logits_path(lora, packing):
    model, rows, pad = lora
    inputs = batches.collate(rows, pad, packing, 128).inputs
    targets = int((inputs["labels"][:, 1:] != chat.IGNORE_INDEX).sum())
    full = model(**inputs, use_cache=False, num_items_in_batch=targets).loss
    full.backward()
    full_grads = _grads(model)
    mine, widths = _head_widths(model, lambda: token_loss_sum(model, model, inputs) / targets)
    mine.backward()
    assert widths == [(1, targets)]  # the head saw the supervised positions only
    assert _off(mine, full) < 1e-5
    assert _close(_grads(model), full_grads) < 1e-5


def test_the_preference_log_probs_and_gradients_equal_the_full_logits_path(lora):
    model, rows, pad = lora
    batch = pref_collate(rows, pad)
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False).logits
    labels = batch["labels"][:, 1:]
    mask = labels != chat.IGNORE_INDEX
    per_token = torch.gather(logits[:, :-1].float().log_softmax(-1), 2, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    full = (per_token * mask).sum(-1)
    (full * torch.tensor([1.0, -0.5, 0.25, 2.0])).sum().backward()
    full_grads = _grads(model)
    (sums, counts, (mine_tokens, mine_mask)), widths = _head_widths(
        model, lambda: completion_logps(model, rows, pad, "cpu"))
    (sums * torch.tensor([1.0, -0.5, 0.25, 2.0])).sum().backward()
    assert widths == [(1, int(mask.sum()))]
    assert _off(sums, full) < 1e-5 and torch.equal(counts, mask.sum(-1))
    assert _off(mine_tokens, per_token * mask) < 1e-5 and torch.equal(mine_mask, mask)
    assert _close(_grads(model), full_grads) < 1e-5


def test_grpo_answer_log_probs_and_gradients_equal_the_full_logits_path(lora):
    model, rows, pad = lora
    prompts = [r.input_ids[:-3] for r in rows]
    answers = [r.input_ids[-3:] for r in rows[:2]] + [r.input_ids[-2:] for r in rows[2:]]  # two answers padded
    width_p, n = max(len(p) for p in prompts), 3
    ids = [[pad] * (width_p - len(p)) + p + a + [pad] * (n - len(a)) for p, a in zip(prompts, answers)]
    attn = [[0] * (width_p - len(p)) + [1] * (len(p) + len(a)) + [0] * (n - len(a)) for p, a in zip(prompts, answers)]
    ids, attn = torch.tensor(ids), torch.tensor(attn)
    positions = (attn.cumsum(-1) - 1).clamp(min=0)
    answer_mask = torch.tensor([[1.0] * len(a) + [0.0] * (n - len(a)) for a in answers])
    logits = model(input_ids=ids, attention_mask=attn, position_ids=positions, use_cache=False,
                   logits_to_keep=n + 1).logits[:, :-1].float() / 0.7
    full = logits.log_softmax(-1).gather(-1, ids[:, -n:].unsqueeze(-1)).squeeze(-1) * answer_mask
    full.sum().backward()
    full_grads = _grads(model)
    mine, widths = _head_widths(model, lambda: grpo.token_logps(model, ids, attn, n, 0.7, positions, answer_mask))
    mine.sum().backward()
    assert widths == [(1, int(answer_mask.sum()))]
    assert _off(mine, full) < 1e-5 and bool((mine[answer_mask == 0] == 0).all())
    # float32 sums over 49,152 columns in another order, through 30 layers at temperature 0.7: 1.9e-5 measured
    assert _close(_grads(model), full_grads) < 5e-5


def test_the_shared_prefix_gives_the_unshared_loss_and_gradients(lora):
    """The system prompt runs once for the micro-batch; loss and LoRA gradients equal every row running it."""
    model, rows, pad = lora
    inputs = batches.collate(rows, pad).inputs
    targets = int((inputs["labels"][:, 1:] != chat.IGNORE_INDEX).sum())
    sharing = replace(Sharing.decide(model, packing=False, gradient_checkpointing=False, distributed=False),
                      layout="cache")  # the cached prefix: test_prefix_tree.py holds the tree
    assert sharing.on, sharing.reason
    length = shared(inputs)
    first_label = min(r.labels.index(next(x for x in r.labels if x != chat.IGNORE_INDEX)) for r in rows)
    assert 15 <= length < first_label  # the compiled system turn at least, never a supervised token
    full = token_loss_sum(model, model, inputs) / targets
    full.backward()
    full_grads = _grads(model)
    mine, widths = _head_widths(model, lambda: sharing.loss_sum(model, model, inputs) / targets)
    mine.backward()
    assert widths == [(1, 1), (1, targets)]  # the prefix's one kept position, then the supervised ones
    assert _off(mine, full) < 1e-5
    assert _close(_grads(model), full_grads) < 1e-5


def test_the_shared_prefix_is_off_where_it_cannot_be_shared_and_says_why(lora):
    model, _, _ = lora
    assert "packing" in Sharing.decide(model, True, False, False).reason
    checkpointing = Sharing.decide(model, False, True, False)  # the tree alone: no cache to grow twice
    assert checkpointing.on and checkpointing.layout == "no_cache" and "gradient_checkpointing" in checkpointing.reason
    assert "torchrun" in Sharing.decide(model, False, False, True).reason
    model.get_base_model().config.sliding_window, was = 64, getattr(model.get_base_model().config, "sliding_window", None)
    try:
        off = Sharing.decide(model, False, False, False)
    finally:
        model.get_base_model().config.sliding_window = was
    assert not off.on and "sliding-window" in off.reason


def test_grpo_with_each_groups_prompt_once_gives_the_unshared_loss_and_gradients(lora):
    """Two groups of three answers (one group split across micro-batches), KL to a reference and old log-probs:
    the step's loss and LoRA gradients equal every answer running its whole prompt."""
    from tt_engine_adapter.runtime.reinforcement import train as reinforcement
    from tt_engine_adapter.runtime.config import ReinforcementSettings
    from tt_engine_adapter.runtime.reinforcement.prompts import Prompt

    model, rows, pad = lora
    prompts = [Prompt(str(i), "", "", tuple(r.input_ids[:-4])) for i, r in enumerate(rows[:2])]
    answers = [rows[0].input_ids[-4:], rows[0].input_ids[-3:], rows[1].input_ids[-4:],
               rows[1].input_ids[-4:-1], rows[1].input_ids[-2:], rows[0].input_ids[-4:]]
    group = reinforcement.Group(prompts, answers, [""] * 6, [1.0, 0.0, 0.5, 0.0, 1.0, 0.25], 0.0)
    rs = ReinforcementSettings(group_size=3, kl_beta=0.04, temperature=0.7)
    reference = reinforcement.ReferenceWeights(model)
    with torch.no_grad():
        for p in reference.params:
            p.mul_(1.1)  # the policy has moved from its reference
    sharing = replace(Sharing.decide(model, packing=False, gradient_checkpointing=False, distributed=False),
                      layout="cache")  # the cached prefix: test_prefix_tree.py holds the tree
    results = []
    for using in (None, sharing):
        stats, widths = _head_widths(model, lambda: reinforcement.backward(
            model, group, rs, micro_batch=4, pad_id=pad, device="cpu", reference=reference, passes=2,
            between=lambda: None, sharing=using))
        results.append((stats["loss"], _grads(model), widths))
    (plain_loss, plain_grads, plain_widths), (loss, grads, widths) = results
    assert len(widths) == 2 * len(plain_widths)  # a prefix forward before each micro-batch's
    assert abs(loss - plain_loss) <= 1e-5 * max(1.0, abs(plain_loss))
    assert _close(grads, plain_grads) < 1e-5
    with torch.no_grad():
        for p in reference.params:
            p.div_(1.1)


def test_preference_log_probs_with_the_shared_prefix_equal_the_unshared_ones(lora):
    """The reference and preference stages' completion log-probs: the rows' system prompt once, the same
    per-token log-probs and LoRA gradients as every row running it."""
    model, rows, pad = lora
    weights = torch.tensor([1.0, -0.5, 0.25, 2.0])
    plain, _, (plain_tokens, _) = completion_logps(model, rows, pad, "cpu")
    (plain * weights).sum().backward()
    plain_grads = _grads(model)
    sharing = replace(Sharing.decide(model, packing=False, gradient_checkpointing=False, distributed=False),
                      layout="cache")  # the cached prefix: test_prefix_tree.py holds the tree
    (sums, _, (tokens, _)), widths = _head_widths(model, lambda: completion_logps(model, rows, pad, "cpu", sharing))
    (sums * weights).sum().backward()
    assert len(widths) == 2 and widths[0] == (1, 1)  # the prefix's forward, then the rest's
    assert _off(tokens, plain_tokens) < 1e-5 and _off(sums, plain) < 1e-5
    assert _close(_grads(model), plain_grads) < 1e-5
