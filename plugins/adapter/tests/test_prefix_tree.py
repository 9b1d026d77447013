"""Every distinct token once (runtime/tree.py), on the real base (SmolLM2-135M-Instruct, LoRA with rsLoRA on every
linear layer): a micro-batch laid out as one prefix tree gives the unshared path's SFT loss, preference
log-probs and GRPO step (loss and LoRA gradients within 1e-5) in one forward; GRPO's old and reference
log-probs come from one forward for the whole step and the old ones from the first pass; answers whose advantage is exactly 0 (no KL term) are left
out of the update with the same gradients. One model load (module fixture).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from tt_engine_adapter.runtime import batches, chat, tree
from tt_engine_adapter.runtime.logits import predicting, token_loss_sum
from tt_engine_adapter.runtime.memory import CHECKPOINTING
from tt_engine_adapter.runtime.prefix import Sharing, shared
from tt_engine_adapter.runtime.preference.logps import completion_logps
from tt_engine_adapter.runtime.reinforcement import grpo
from review_lora_support import off, review_lora

@pytest.fixture(scope="module")
def lora(real_base):
    return review_lora(real_base, seed=1)


@pytest.fixture(autouse=True)
def _no_gradients_left(lora):
    """A test that fails between its backward and its comparison leaves no gradient to the next."""
    yield
    lora[0].zero_grad(set_to_none=True)


def _grads(model) -> torch.Tensor:
    out = torch.cat([p.grad.detach().flatten() for p in model.parameters() if p.requires_grad])
    model.zero_grad(set_to_none=True)
    return out


_off = off


def _forwards(model, run):
    """`run()`'s value and the token shapes of every forward of the decoder stack during it."""
    shapes = []
    decoder = model.get_base_model().model
    handle = decoder.register_forward_pre_hook(
        lambda m, args, kwargs: shapes.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True)
    try:
        value = run()
    finally:
        handle.remove()
    return value, shapes


def _distinct(rows) -> int:
    """The tree's nodes: each distinct start before a row's first read position (the one before its first
    label), then every row's own tokens from there."""
    firsts = [next(t for t in range(len(r.labels)) if r.labels[t] != chat.IGNORE_INDEX) - 1 for r in rows]
    starts = {tuple(r.input_ids[:k]) for r, first in zip(rows, firsts) for k in range(1, first + 1)}
    return len(starts) + sum(len(r.input_ids) - first for r, first in zip(rows, firsts))


def _tree_sharing(model) -> Sharing:
    return replace(Sharing.decide(model, packing=False, gradient_checkpointing=False, distributed=False), layout="tree")


def test_the_tree_shares_each_distinct_start_until_a_row_reads_logits_and_a_node_sees_its_ancestors_alone():
    ids = torch.tensor([[0, 0, 5, 6, 7], [5, 6, 8, 0, 0], [5, 6, 7, 9, 0], [5, 6, 7, 0, 0]])
    keep = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 0, 0]]).bool()
    read = torch.zeros_like(keep)
    read[2, 2] = True  # row 2 reads the logits at its 7: from there its nodes are its own
    planned = tree.plan(ids, keep, read)
    assert planned.ids.tolist() == [[5, 6, 7, 8, 7, 9]]  # 5 6 7 | 5 6 8 | 5 6 (7 9 its own) | 5 6 7
    assert planned.positions.tolist() == [[0, 1, 2, 2, 2, 3]]  # a token's position in its row, padded or not
    assert planned.index.tolist() == [[-1, -1, 0, 1, 2], [0, 1, 3, -1, -1], [0, 1, 4, 5, -1], [0, 1, 2, -1, -1]]
    seen = planned.mask("sdpa", torch.float32)[0, 0]
    assert seen.int().tolist() == [[1, 0, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0], [1, 1, 0, 1, 0, 0],
                                   [1, 1, 0, 0, 1, 0], [1, 1, 0, 0, 1, 1]]
    additive = planned.mask("eager", torch.float32)[0, 0]
    assert bool((additive[seen] == 0).all()) and bool((additive[~seen] == torch.finfo(torch.float32).min).all())
    wide = torch.arange(2 * 2100).view(2, 2100)  # no shared start: 4,200 nodes, over MAX_NODES
    everything = torch.ones_like(wide, dtype=torch.bool)
    assert tree.plan(wide, everything, ~everything) is None


def test_the_sft_loss_and_gradients_through_the_tree_equal_every_row_alone_in_one_forward(lora):
    model, rows, pad = lora
    inputs = batches.collate(rows, pad).inputs
    targets = int((inputs["labels"][:, 1:] != chat.IGNORE_INDEX).sum())
    plain = token_loss_sum(model, model, inputs) / targets
    plain.backward()
    plain_grads = _grads(model)
    mine, shapes = _forwards(model, lambda: _tree_sharing(model).loss_sum(model, model, inputs) / targets)
    mine.backward()
    assert shapes == [(1, _distinct(rows))]  # one forward, one row: the common start once, no padding
    assert _distinct(rows) <= int(inputs["attention_mask"].sum()) - 3 * (shared(inputs) + 1)
    assert _off(mine, plain) < 1e-5
    assert _off(_grads(model), plain_grads) < 1e-5


def test_under_gradient_checkpointing_the_tree_alone_runs_and_equals_every_row_alone(lora):
    """Gradient checkpointing recomputes each layer in the backward: the tree has no cache to grow twice, so it
    runs (and the cached prefix never does), with the plain path's loss and gradients."""
    model, rows, pad = lora
    inputs = batches.collate(rows, pad).inputs
    targets = int((inputs["labels"][:, 1:] != chat.IGNORE_INDEX).sum())
    sharing = Sharing.decide(model, packing=False, gradient_checkpointing=True, distributed=False)
    assert sharing.on and sharing.layout == "no_cache" and not sharing.cached
    plain = token_loss_sum(model, model, inputs) / targets
    plain.backward()
    plain_grads = _grads(model)
    base = model.get_base_model()
    base.enable_input_require_grads()
    base.activation_checkpointing_enable(activation_checkpointing_kwargs=CHECKPOINTING)  # as runtime/memory.py
    model.train()  # transformers checkpoints layers in training mode only (dropout is 0 here)
    layer = base.model.layers[0]
    layer_runs, checkpointed = [], layer._gradient_checkpointing_func
    layer._gradient_checkpointing_func = lambda *a, **k: layer_runs.append(1) or checkpointed(*a, **k)
    try:
        mine, shapes = _forwards(model, lambda: sharing.loss_sum(model, model, inputs) / targets)
        mine.backward()
    finally:
        layer._gradient_checkpointing_func = checkpointed
        base.activation_checkpointing_disable()
        base.disable_input_require_grads()
        model.eval()
    assert shapes == [(1, _distinct(rows))] and layer_runs == [1]  # the layer ran through torch's checkpoint
    assert _off(mine, plain) < 1e-5
    assert _off(_grads(model), plain_grads) < 1e-5


def test_preference_log_probs_through_the_tree_share_each_pairs_prompt_and_equal_the_unshared_ones(lora):
    """A chosen and a rejected completion of one prompt: the tree runs their prompt once (up to the answer),
    not just the system prompt every row shares."""
    model, rows, pad = lora
    flipped = [replace(r, input_ids=r.input_ids[:-3] + rows[(i + 1) % 2].input_ids[-3:],
                       labels=r.labels[:-3] + rows[(i + 1) % 2].labels[-3:]) for i, r in enumerate(rows[:2])]
    both = rows[:2] + flipped  # rows 0/2 and 1/3 share all but their last three tokens
    weights = torch.tensor([1.0, -0.5, 0.25, 2.0])
    plain, _, (plain_tokens, _) = completion_logps(model, both, pad, "cpu")
    (plain * weights).sum().backward()
    plain_grads = _grads(model)
    (sums, _, (tokens, _)), shapes = _forwards(model, lambda: completion_logps(model, both, pad, "cpu",
                                                                                _tree_sharing(model)))
    (sums * weights).sum().backward()
    assert shapes == [(1, _distinct(both))]
    assert _off(tokens, plain_tokens) < 1e-5 and _off(sums, plain) < 1e-5
    assert _off(_grads(model), plain_grads) < 1e-5


def _grpo_group(rows, rewards):
    from tt_engine_adapter.runtime.reinforcement import train as reinforcement
    from tt_engine_adapter.runtime.reinforcement.prompts import Prompt

    prompts = [Prompt(str(i), "", "", tuple(r.input_ids[:-4])) for i, r in enumerate(rows[:2])]
    answers = [rows[0].input_ids[-4:], rows[0].input_ids[-3:], rows[1].input_ids[-4:],
               rows[1].input_ids[-4:-1], rows[1].input_ids[-2:], rows[0].input_ids[-4:]]
    return reinforcement.Group(prompts, answers, [""] * 6, rewards, 0.0)


def test_a_grpo_step_through_the_tree_equals_the_unshared_one_with_old_and_reference_log_probs_once(lora):
    """Two groups of three answers in micro-batches of 4 (one group split), KL to a reference, 2 iterations: the
    step's loss and LoRA gradients equal the unshared path's; the reference log-probs take one forward for the
    whole step, the old ones none (the first pass's own), and each micro-batch one."""
    from tt_engine_adapter.runtime.config import ReinforcementSettings
    from tt_engine_adapter.runtime.reinforcement import train as reinforcement

    model, rows, pad = lora
    group = _grpo_group(rows, [1.0, 0.0, 0.5, 0.0, 1.0, 0.25])
    rs = ReinforcementSettings(group_size=3, kl_beta=0.04, temperature=0.7)
    reference = reinforcement.ReferenceWeights(model)
    with torch.no_grad():
        for p in reference.params:
            p.mul_(1.1)  # the policy has moved from its reference
    try:
        results = []
        for using in (Sharing(False, "off"), _tree_sharing(model)):
            stats, shapes = _forwards(model, lambda: reinforcement.backward(
                model, group, rs, micro_batch=4, pad_id=pad, device="cpu", reference=reference, passes=2,
                between=lambda: None, sharing=using))
            results.append((stats["loss"], _grads(model), shapes))
    finally:
        with torch.no_grad():
            for p in reference.params:
                p.div_(1.1)
    (plain_loss, plain_grads, plain_shapes), (loss, grads, shapes) = results
    assert [s[0] for s in plain_shapes] == [6, 4, 2, 4, 2]  # the reference (whole step), 2 passes × 2 chunks
    # the six answers fit one tree no bigger than 4 padded rows: the reference, then one forward a pass
    assert len(shapes) == 3 and all(s == shapes[0] and s[0] == 1 for s in shapes)
    assert shapes[0][1] <= 4 * plain_shapes[1][1] and shapes[0][1] < 6 * plain_shapes[1][1] * 0.6
    assert abs(loss - plain_loss) <= 1e-5 * max(1.0, abs(plain_loss))
    assert _off(grads, plain_grads) < 1e-5


def test_three_grpo_steps_through_the_tree_leave_the_adapter_within_1e_5_of_the_unshared_path(lora):
    """A short run: 3 steps of 2 iterations each, KL to the reference, the same group every step. Plain SGD:
    AdamW divides by the root of each weight's squared gradient, so a weight whose gradient is rounding noise
    (|g| near 1e-9 on this random adapter) moves by about its learning rate on either path, whatever the
    paths' agreement (measured: 3e-3 apart after 3 steps where every gradient agreed to 1e-5)."""
    from tt_engine_adapter.runtime.config import ReinforcementSettings
    from tt_engine_adapter.runtime.reinforcement import train as reinforcement

    model, rows, pad = lora
    trainable = [p for p in model.parameters() if p.requires_grad]
    start = [p.detach().clone() for p in trainable]
    group = _grpo_group(rows, [1.0, 0.0, 0.5, 0.0, 1.0, 0.25])
    rs = ReinforcementSettings(group_size=3, kl_beta=0.04, temperature=0.7, iterations=2)
    adapters = []
    try:
        for using in (Sharing(False, "off"), _tree_sharing(model)):
            with torch.no_grad():
                for p, s in zip(trainable, start):
                    p.copy_(s)
            reference = reinforcement.ReferenceWeights(model)
            optimizer = torch.optim.SGD(trainable, lr=1e-3)

            def apply() -> None:
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)

            for _ in range(3):
                reinforcement.backward(model, group, rs, micro_batch=4, pad_id=pad, device="cpu", reference=reference,
                                       passes=rs.iterations, between=apply, sharing=using)
            adapters.append(torch.cat([p.detach().flatten().clone() for p in trainable]))
    finally:
        with torch.no_grad():
            for p, s in zip(trainable, start):
                p.copy_(s)
    moved = float((adapters[0] - torch.cat([s.flatten() for s in start])).abs().max())
    assert moved > 1e-3  # the steps did move the adapter
    assert float((adapters[1] - adapters[0]).abs().max()) < 1e-5


def test_the_second_iteration_measures_its_ratio_against_the_first_passes_log_probs(lora):
    """2 iterations with an optimizer step between: the second pass's ratio is to the log-probs the first pass
    computed (the weights before the step), so a step large enough moves it past the clip range."""
    from tt_engine_adapter.runtime.config import ReinforcementSettings
    from tt_engine_adapter.runtime.reinforcement import train as reinforcement

    model, rows, pad = lora
    trainable = [p for p in model.parameters() if p.requires_grad]
    start = [p.detach().clone() for p in trainable]
    optimizer = torch.optim.SGD(trainable, lr=0.05)

    def apply() -> None:
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    rs = ReinforcementSettings(group_size=3, kl_beta=0.0, temperature=0.7, iterations=2)
    try:
        stats = reinforcement.backward(model, _grpo_group(rows, [1.0, 0.0, 0.5, 0.0, 1.0, 0.25]), rs, micro_batch=4,
                                       pad_id=pad, device="cpu", reference=None, passes=2, between=apply,
                                       sharing=_tree_sharing(model))
    finally:
        with torch.no_grad():
            for p, s in zip(trainable, start):
                p.copy_(s)
    assert stats["clip_ratio"] > 0  # 0 when each pass took its own log-probs as the old ones (ratio 1)


def test_answers_with_advantage_zero_are_left_out_of_the_update_with_the_same_gradients(lora, monkeypatch):
    """No KL term: the first group's answers all scored 1, so their advantage is 0 and their loss 0 whatever
    the weights; the update runs the other group alone and its loss and gradients equal running all six.
    A step where every group has zero spread still hands the optimizer zero gradients."""
    from tt_engine_adapter.runtime.config import ReinforcementSettings
    from tt_engine_adapter.runtime.reinforcement import train as reinforcement

    model, rows, pad = lora
    rs = ReinforcementSettings(group_size=3, kl_beta=0.0, temperature=0.7)
    group = _grpo_group(rows, [1.0, 1.0, 1.0, 0.0, 1.0, 0.25])
    sharing = _tree_sharing(model)

    def step():
        return reinforcement.backward(model, group, rs, micro_batch=4, pad_id=pad, device="cpu", reference=None,
                                      passes=2, between=lambda: None, sharing=sharing)

    stats, shapes = _forwards(model, step)
    grads = _grads(model)
    with monkeypatch.context() as patched:
        patched.setattr(grpo, "learning_rows", lambda advantages, beta: list(range(int(advantages.shape[0]))))
        all_stats, all_shapes = _forwards(model, step)
        all_grads = _grads(model)
    assert len(shapes) == len(all_shapes) == 2 and shapes[0][1] < all_shapes[0][1]  # one group's answers left out
    assert abs(stats["loss"] - all_stats["loss"]) <= 1e-6 and stats["clip_ratio"] == all_stats["clip_ratio"]
    assert _off(grads, all_grads) < 1e-5 and float(grads.abs().max()) > 0
    flat = _grpo_group(rows, [1.0] * 6)
    none, none_shapes = _forwards(model, lambda: reinforcement.backward(
        model, flat, rs, micro_batch=4, pad_id=pad, device="cpu", reference=None, passes=1, sharing=sharing))
    assert none_shapes == [] and none["loss"] == 0.0
    assert all(p.grad is not None and not p.grad.any() for p in model.parameters() if p.requires_grad)
    model.zero_grad(set_to_none=True)


def test_the_stage_chooses_the_tree_where_it_costs_less_and_says_where_it_cannot_run_one(lora):
    model, rows, pad = lora
    sharing = Sharing.decide(model, packing=False, gradient_checkpointing=False, distributed=False)
    assert sharing.on and sharing.layout == "auto" and "prefix tree" in sharing.reason
    inputs = batches.collate(rows, pad).inputs
    assert sharing.as_tree(model, inputs, predicting(inputs["labels"]), shared(inputs)) is not None  # 4 review rows: the tree is cheaper
    planned = tree.plan(inputs["input_ids"], inputs["attention_mask"] == 1, predicting(inputs["labels"]))
    assert planned.cheaper(576, 4, 60, 20) and not planned.cheaper(576, 1, planned.nodes, 0)  # one row: no gain
    config = model.get_base_model().config
    was = config._attn_implementation
    config._attn_implementation = "flash_attention_2"  # takes no custom mask
    try:
        assert sharing.as_tree(model, inputs, predicting(inputs["labels"]), shared(inputs)) is None
        off = Sharing.decide(model, packing=False, gradient_checkpointing=False, distributed=False)
    finally:
        config._attn_implementation = was
    assert off.on and "no prefix tree: flash_attention_2" in off.reason
