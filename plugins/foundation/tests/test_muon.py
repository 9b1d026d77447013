"""Muon + AdamW (runtime/optim.py, runtime/hyperparams.py) and the schedules (runtime/schedule.py).

One optimizer step on a fixed batch of a tiny GPT is checked against a reference computed here from the
published algorithm (momentum, Nesterov, quintic Newton-Schulz in float64), and the orthogonalisation
independently by an SVD: the update's singular vectors are the momentum's, its singular values near 1.
"""

import io
import math

import pytest
import torch

from tt_engine_foundation.runtime import schedule
from tt_engine_foundation.runtime.hyperparams import muon_rates
from tt_engine_foundation.runtime.model import GPT, config_for_depth
from tt_engine_foundation.runtime.optim import build_adamw, build_muon_adamw

NS = (3.4445, -4.775, 2.0315)


def _reference_orthogonalise(m: torch.Tensor) -> torch.Tensor:
    """The published quintic iteration, in float64."""
    x = m.double()
    tall = x.shape[0] > x.shape[1]
    if tall:
        x = x.T
    x = x / x.norm().clamp(min=1e-7)
    a, b, c = NS
    for _ in range(5):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return (x.T if tall else x).float()


def _backward(model, seed):
    """Gradients of one fixed batch; 512 positions, so every matrix's gradient has full rank (a rank-deficient
    one leaves directions the iteration would amplify from rounding alone)."""
    model.zero_grad(set_to_none=True)
    rows = torch.randint(0, 320, (16, 33), generator=torch.Generator().manual_seed(seed))
    logits = model(rows[:, :-1])
    torch.nn.functional.cross_entropy(logits.reshape(-1, 320), rows[:, 1:].reshape(-1)).backward()


def _model_and_grads(seed=0):
    torch.manual_seed(seed)
    model = GPT(config_for_depth(2, 320, 32))
    model.init_weights(seed)
    with torch.no_grad():  # non-zero output projections, so every matrix gets a gradient
        for name, p in model.named_parameters():
            if name.endswith(("o_proj.weight", "down_proj.weight")):
                p.normal_(0, 0.02)
    _backward(model, seed)
    return model


def test_two_steps_equal_the_reference_and_are_orthogonal():
    """The second step (the first only scales the gradient, so it cannot tell momentum from none)."""
    model = _model_and_grads()
    rates = muon_rates(128, 2, 320, 4096)
    optimizer = build_muon_adamw(model, rates, torch.device("cpu"))
    momentum = optimizer.muon.param_groups[0]["momentum"]
    wd, lr = rates.matrix_weight_decay, rates.matrix_lr
    first = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    first_params = {n: p.detach().clone() for n, p in model.named_parameters()}
    optimizer.step()
    _backward(model, 1)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    optimizer.step()
    after = dict(model.named_parameters())
    matrices = [n for n in before if n.startswith("model.layers.") and before[n].ndim == 2]
    assert len(matrices) == 2 * 7
    for name in matrices:
        g = grads[name]
        buf = momentum * (1 - momentum) * first[name] + (1 - momentum) * g  # B2 = mu B1 + (1 - mu) G2
        nesterov = (1 - momentum) * g + momentum * buf
        rows, cols = g.shape
        adjusted = lr * math.sqrt(max(1.0, rows / cols))
        observed = (before[name] * (1 - lr * wd) - after[name].detach()) / adjusted
        expected = _reference_orthogonalise(nesterov)
        assert (observed - expected).norm() / expected.norm() < 1e-4, name
        # independent check by SVD: U^T O V is diagonal (O has the momentum's singular vectors), no direction
        # is flipped, and every direction not vanishingly small (five steps lift 1/500 of the Frobenius norm
        # and up) sits in the quintic's band around 1 (U S' V^T, S' within about 0.7-1.2)
        u, s, vh = torch.linalg.svd(nesterov.double(), full_matrices=False)
        core = u.T @ observed.double() @ vh.T
        diagonal = torch.diagonal(core)
        off = core - torch.diag(diagonal)
        assert off.norm() / diagonal.norm() < 0.05, name
        lifted = diagonal[s / s.norm() > 5e-3]
        assert len(lifted) > len(s) // 2 and diagonal.min() > -0.05, name
        assert lifted.min() > 0.5 and lifted.max() < 1.3, (name, lifted.min(), lifted.max())
    # AdamW on the embedding and the head (each with its own betas), no decay: bias-corrected moments of the two gradients
    for name, lr_group, (b1, b2) in (("model.embed_tokens.weight", rates.embedding_lr, rates.embedding_betas),
                                     ("lm_head.weight", rates.head_lr, rates.head_betas)):
        g1, g2 = first[name], grads[name]
        m = ((1 - b1) * b1 * g1 + (1 - b1) * g2) / (1 - b1**2)
        v = ((1 - b2) * b2 * g1**2 + (1 - b2) * g2**2) / (1 - b2**2)
        step_one = first_params[name] - lr_group * g1 / (g1.abs() + 1e-10)
        assert torch.allclose(before[name], step_one, atol=1e-6), name
        assert torch.allclose(after[name].detach(), before[name] - lr_group * m / (v.sqrt() + 1e-10), atol=1e-6), name


def test_muon_trains_only_hidden_matrices_and_its_state_round_trips():
    model = _model_and_grads()
    optimizer = build_muon_adamw(model, muon_rates(128, 2, 320, 4096), torch.device("cpu"))
    muon_ids = {id(p) for g in optimizer.muon.param_groups for p in g["params"]}
    for name, p in model.named_parameters():
        assert (id(p) in muon_ids) == (name.startswith("model.layers.") and p.ndim == 2), name
    optimizer.step()
    buffer = io.BytesIO()
    torch.save(optimizer.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    twin_model = _model_and_grads()
    twin_model.load_state_dict(model.state_dict())
    twin = build_muon_adamw(twin_model, muon_rates(128, 2, 320, 4096), torch.device("cpu"))
    twin.load_state_dict(state)
    for opt in (optimizer, twin):
        opt.step()
    for (name, a), b in zip(model.named_parameters(), twin_model.parameters()):
        assert torch.equal(a, b), name
    with pytest.raises(ValueError, match="not a Muon"):
        twin.load_state_dict(state["adamw"])


def test_qk_norm_weights_train_with_the_other_norms():
    """foundation.qk_norm's q_norm / k_norm weights: AdamW's norm group (its rate, no decay), never Muon; and
    without decay under optimizer adamw."""
    model = GPT(config_for_depth(2, 320, 32, qk_norm=True))
    rates = muon_rates(128, 2, 320, 4096)
    optimizer = build_muon_adamw(model, rates, torch.device("cpu"))
    names = {id(p): name for name, p in model.named_parameters()}
    norm_group = optimizer.adamw.param_groups[-1]  # embedding, head, norms (optim.build_muon_adamw)
    assert norm_group["base_lr"] == rates.norm_lr and norm_group["weight_decay"] == 0.0
    in_group = {names[id(p)] for p in norm_group["params"]}
    assert in_group == {n for n in names.values() if n.endswith("norm.weight")}
    assert {f"model.layers.{i}.self_attn.{q}_norm.weight" for i in range(2) for q in "qk"} <= in_group
    assert not in_group & {names[id(p)] for g in optimizer.muon.param_groups for p in g["params"]}
    adamw = build_adamw(model, 1e-3, 0.1, torch.device("cpu"))
    decayed = {names[id(p)] for g in adamw.param_groups if g["weight_decay"] > 0 for p in g["params"]}
    assert not any(n.endswith("norm.weight") for n in decayed)


def test_rates_follow_width_and_tokens_per_step():
    ref = muon_rates(768, 12, 32768, 2**19)  # nanochat's reference point, exactly
    assert (ref.matrix_lr, ref.embedding_lr, ref.head_lr, ref.matrix_weight_decay) == (0.02, 0.3, 0.008, 0.28)
    quarter = muon_rates(768, 12, 32768, 2**17)  # below 2^19 the rates stay at the reference; decay still falls
    assert quarter.matrix_lr == 0.02 and quarter.matrix_weight_decay == pytest.approx(0.14)
    double = muon_rates(768, 12, 32768, 2**21)  # above it, the square-root batch rule
    assert double.matrix_lr == pytest.approx(0.04) and double.embedding_lr == pytest.approx(0.6)
    narrow = muon_rates(192, 12, 32768, 2**19)
    assert narrow.embedding_lr == pytest.approx(0.6) and narrow.matrix_lr == pytest.approx(0.02)
    assert muon_rates(256, 4, 8192, 4096).matrix_weight_decay > ref.matrix_weight_decay  # a shorter horizon
    forced = muon_rates(768, 12, 32768, 2**19, learning_rate=0.04)
    assert forced.matrix_lr == pytest.approx(0.04) and forced.embedding_lr == pytest.approx(0.6)


def test_small_batches_get_the_documented_rates_not_the_square_root_rule():
    """docs/foundation.md's figures: depth 4 at 4,096 tokens per step, and depth 2 at 1,024 (the quickstart's
    batch), where the square-root rule gave 0.0018 and 0.00088 (docs/performance.md: far below the optimum)."""
    d4 = muon_rates(256, 4, 8192, 4096)
    assert d4.matrix_lr == pytest.approx(0.02) and d4.embedding_lr == pytest.approx(0.52, abs=0.005)
    assert d4.head_lr == pytest.approx(0.0139, abs=5e-5) and d4.matrix_weight_decay == pytest.approx(0.51, abs=0.005)
    d2 = muon_rates(128, 2, 2048, 1024)
    assert d2.matrix_lr == pytest.approx(0.02) and d2.embedding_lr == pytest.approx(0.3 * math.sqrt(6))
    forced = muon_rates(128, 2, 2048, 1024, learning_rate=0.005)  # the override still replaces it
    assert forced.matrix_lr == pytest.approx(0.005) and forced.embedding_lr == pytest.approx(0.075 * math.sqrt(6))


def test_warmdown_holds_the_peak_then_falls_linearly_to_the_floor():
    total, warmup = 100, 10
    mult = [schedule.lr_multiplier(s, total, warmup, 0.1, "warmdown", 0.4) for s in range(total)]
    assert mult[0] == pytest.approx(0.1) and mult[9] == pytest.approx(1.0)
    assert all(m == 1.0 for m in mult[10:60])
    falling = mult[60:]
    assert falling[0] == pytest.approx(1.0) and falling[-1] == pytest.approx(0.1 + 0.9 / 40)
    steps = [a - b for a, b in zip(falling, falling[1:])]
    assert all(d == pytest.approx(0.9 / 40) for d in steps)


def test_cosine_is_kept():
    total, warmup, floor = 50, 5, 0.1
    for step in (5, 20, 49):
        progress = (step - warmup) / (total - warmup)
        expected = floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))
        assert schedule.lr_multiplier(step, total, warmup, floor, "cosine") == pytest.approx(expected)
    with pytest.raises(ValueError, match="unknown learning-rate schedule"):
        schedule.lr_multiplier(20, total, warmup, floor, "linear")


def test_apply_sets_muon_momentum_and_decay_by_step():
    model = _model_and_grads()
    rates = muon_rates(128, 2, 320, 4096)
    optimizer = build_muon_adamw(model, rates, torch.device("cpu"))
    schedule.apply(optimizer, 0, 100, 5, 0.1, "warmdown", 0.5)
    group = optimizer.muon.param_groups[0]
    assert group["momentum"] == pytest.approx(0.85) and group["weight_decay"] == pytest.approx(rates.matrix_weight_decay)
    schedule.apply(optimizer, 30, 100, 5, 0.1, "warmdown", 0.5)
    assert group["momentum"] == pytest.approx(0.95) and group["lr"] == pytest.approx(rates.matrix_lr)
    schedule.apply(optimizer, 99, 100, 5, 0.1, "warmdown", 0.5)
    assert group["momentum"] < 0.95 and group["weight_decay"] < 0.01 * rates.matrix_weight_decay
    assert optimizer.adamw.param_groups[0]["lr"] == pytest.approx(rates.embedding_lr * (0.1 + 0.9 / 50))


def test_the_momentum_range_comes_from_the_rates():
    import dataclasses

    model = _model_and_grads()
    rates = dataclasses.replace(muon_rates(128, 2, 320, 4096), momentum_start=0.7, momentum_end=0.98)
    optimizer = build_muon_adamw(model, rates, torch.device("cpu"))
    group = optimizer.muon.param_groups[0]
    schedule.apply(optimizer, 0, 100, 5, 0.1, "warmdown", 0.5)
    assert group["momentum"] == pytest.approx(0.7)
    schedule.apply(optimizer, 30, 100, 5, 0.1, "warmdown", 0.5)
    assert group["momentum"] == pytest.approx(0.98)
