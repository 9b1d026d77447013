"""The checkpoint Saver: what it writes is the state at the moment `save` returned, whatever
training does to the live tensors afterwards, and its staging buffers are reused."""

from __future__ import annotations

import torch

from tt_engine_foundation.runtime import checkpoints as ckpt
from tt_engine_foundation.runtime.model import GPT, config_for_depth
from tt_engine_foundation.runtime.optim import build_adamw


def _trained_model(steps: int = 2):
    torch.manual_seed(0)
    model = GPT(config_for_depth(1, 96, 16))
    model.init_weights(0)
    optimizer = build_adamw(model, 1e-2, 0.1, torch.device("cpu"))
    x = torch.randint(0, 96, (2, 17))
    for _ in range(steps):
        logits = model(x[:, :-1])
        torch.nn.functional.cross_entropy(logits.reshape(-1, 96), x[:, 1:].reshape(-1)).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return model, optimizer


def _clone_state(model, optimizer):
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    moments = {i: {k: v.clone() for k, v in s.items()} for i, s in optimizer.state_dict()["state"].items()}
    return weights, moments


def test_background_save_writes_the_state_at_save_time(tmp_path):
    model, optimizer = _trained_model()
    weights, moments = _clone_state(model, optimizer)
    saver = ckpt.Saver(tmp_path / "ckpts", keep=2)
    state = ckpt.TrainerState(step=2, samples_consumed=4, tokens_seen=64, last_loss=3.0)
    path = saver.save(model, optimizer, state, {"depth": 1}, "f" * 64)
    with torch.no_grad():  # training goes on while the background thread writes
        for p in model.parameters():
            p.add_(1.0)
        for s in optimizer.state.values():
            s["exp_avg"].mul_(-3.0)
    state.step = 99
    saver.wait()

    ok, reason, metadata = ckpt.verify(path)
    assert ok, reason
    assert path.name == "step-000000002" and metadata["step"] == 2
    fresh, fresh_optimizer = _trained_model(steps=0)
    restored = ckpt.load(path, fresh, fresh_optimizer, torch.device("cpu"))
    assert restored.step == 2 and restored.tokens_seen == 64
    for name, value in fresh.state_dict().items():
        assert torch.equal(value, weights[name]), name
    for index, saved in fresh_optimizer.state_dict()["state"].items():
        for key, value in saved.items():
            assert torch.equal(value, moments[index][key]), (index, key)


def test_staging_buffers_are_reused_between_saves(tmp_path):
    model, optimizer = _trained_model()
    staging = ckpt.Staging()
    first_weights, first_optimizer = staging.snapshot(model, optimizer)
    second_weights, second_optimizer = staging.snapshot(model, optimizer)
    assert all(first_weights[k].data_ptr() == second_weights[k].data_ptr() for k in first_weights)
    for index, saved in first_optimizer["state"].items():
        for key, value in saved.items():
            assert value.data_ptr() == second_optimizer["state"][index][key].data_ptr()
    for name, live in model.state_dict().items():
        assert second_weights[name].data_ptr() != live.data_ptr()  # a copy, not a view


def test_rolling_keeps_the_newest_after_each_durable_save(tmp_path):
    model, optimizer = _trained_model()
    saver = ckpt.Saver(tmp_path / "ckpts", keep=2, backup_dir=tmp_path / "backup")
    for step in (1, 2, 3):
        saver.save(model, optimizer, ckpt.TrainerState(step=step), {}, "f" * 64)
    saver.wait()
    assert [p.name for _, p in ckpt.list_steps(tmp_path / "ckpts")] == ["step-000000003", "step-000000002"]
    assert [p.name for _, p in ckpt.list_steps(tmp_path / "backup")] == ["step-000000003", "step-000000002"]
    assert not [p for p in (tmp_path / "ckpts").iterdir() if p.name.startswith(".tmp-")]


def test_remove_partial_deletes_only_unfinished_saves(tmp_path):
    model, optimizer = _trained_model()
    saver = ckpt.Saver(tmp_path, keep=3)
    saver.save(model, optimizer, ckpt.TrainerState(step=1), {}, "f" * 64)
    saver.wait()
    (tmp_path / ".tmp-step-000000002-4242").mkdir()
    (tmp_path / "step-000000001.replaced-20261130T000000-1").mkdir()  # a damaged one kept aside
    removed = ckpt.remove_partial(tmp_path)
    assert [p.name for p in removed] == [".tmp-step-000000002-4242"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-000000001", "step-000000001.replaced-20261130T000000-1"]
    assert ckpt.remove_partial(None) == [] and ckpt.remove_partial(tmp_path / "absent") == []
