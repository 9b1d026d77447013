"""Packing: the same per-row loss and first step as padded batches, and no attention across rows."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from tt_engine_adapter.runtime import batches, chat
from tt_engine_adapter.runtime import train as loop
from tt_engine_adapter.runtime.config import AdapterSettings
from tt_engine_adapter.testing.tiny_model import sentiment_examples

SYSTEM = {"role": "system", "content": "Classify the sentiment of the review."}
HP = AdapterSettings(batch_size=6, n_epochs=1, max_steps=1, lora_dropout=0.0, lora_rank=4, learning_rate=0.01,
                     max_seq_length=256, warmup_ratio=0.0, lr_scheduler="constant", checkpoint_interval_steps=1000)


@pytest.fixture(scope="module", params=["llama", "qwen3"])
def setup(request, tiny_llama, tiny_qwen3):
    tiny_model = tiny_llama if request.param == "llama" else tiny_qwen3
    tok = AutoTokenizer.from_pretrained(tiny_model)
    eot = chat.end_of_turn_id(tok)
    examples = sentiment_examples(6, seed=3)
    rows = [chat.encode_row(tok, f"r{i}", [SYSTEM, {"role": "user", "content": e["input"] * (1 + i % 3)},
                                           {"role": "assistant", "content": e["output"]}], 256, eot)
            for i, e in enumerate(examples)]
    assert len({len(r.input_ids) for r in rows}) > 1  # rows of different lengths: real padding to save
    return tiny_model, tok, rows


def _model(path):
    torch.manual_seed(0)
    return loop.wrap_lora(AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32), HP)


def _per_row_loss(model, batch: batches.Batch, n_rows: int) -> torch.Tensor:
    logits = model(**{k: v for k, v in batch.inputs.items() if k != "labels"}, use_cache=False).logits
    labels = batch.inputs["labels"]
    losses = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(),
                                               ignore_index=chat.IGNORE_INDEX, reduction="none")
    owner = batch.row_of_token[:, 1:].flatten()
    return torch.stack([losses[(owner == r) & (labels[:, 1:].flatten() != -100)].mean() for r in range(n_rows)])


def test_packed_and_padded_give_the_same_per_row_loss_and_first_step(setup):
    path, tok, rows = setup
    pad = chat.pad_token_id(tok)
    model = _model(path)
    padded = batches.collate(rows, pad)
    packed = batches.collate(rows, pad, packing=True, capacity=HP.max_seq_length)
    assert packed.inputs["input_ids"].shape[0] < len(rows) and "attention_mask" not in packed.inputs
    assert packed.inputs["input_ids"].numel() < padded.inputs["input_ids"].numel()
    # supervised tokens unchanged
    assert sorted(packed.inputs["labels"][packed.inputs["labels"] != -100].tolist()) == \
        sorted(padded.inputs["labels"][padded.inputs["labels"] != -100].tolist())
    with torch.no_grad():
        torch.testing.assert_close(_per_row_loss(model, packed, len(rows)), _per_row_loss(model, padded, len(rows)),
                                   atol=1e-5, rtol=1e-5)
    states, weights = [], []
    for packing in (False, True):
        model = _model(path)
        with tempfile.TemporaryDirectory() as tmp:
            states.append(loop.train(model, rows, dataclasses.replace(HP, packing=packing), pad_id=pad, device="cpu",
                                     autocast_dtype=None, checkpoint_dir=Path(tmp), stage_fingerprint="t",
                                     resume=False))
        weights.append({k: v.detach().clone() for k, v in model.named_parameters() if v.requires_grad})
    assert states[0].losses[0][1] == pytest.approx(states[1].losses[0][1], abs=1e-5)
    for name, value in weights[0].items():
        torch.testing.assert_close(weights[1][name], value, atol=1e-5, rtol=1e-4)
    assert states[1].padding["pad_tokens"] < states[0].padding["pad_tokens"] == states[1].padding["pad_tokens_unpacked"]


def test_a_row_never_attends_to_another(setup):
    path, tok, rows = setup
    pad = chat.pad_token_id(tok)
    packed = batches.collate(rows, pad, packing=True, capacity=HP.max_seq_length)
    owner, positions = packed.row_of_token, packed.inputs["position_ids"]
    for s in range(owner.shape[0]):  # positions restart at 0 at every row (and at the pad tail)
        for r in owner[s].unique().tolist():
            where = (owner[s] == r).nonzero().flatten()
            assert positions[s, where].tolist() == list(range(len(where)))
    model = _model(path)
    first = int(owner[0, 0])  # the first row of the first packed sequence; others follow it
    assert len(owner[0].unique()) > 2
    changed = {k: v.clone() for k, v in packed.inputs.items()}
    changed["input_ids"][owner == first] = tok.convert_tokens_to_ids(tok.tokenize("dull"))[0]
    with torch.no_grad():
        before = model(input_ids=packed.inputs["input_ids"], position_ids=positions, use_cache=False).logits
        after = model(input_ids=changed["input_ids"], position_ids=positions, use_cache=False).logits
    others = owner != first
    torch.testing.assert_close(after[others], before[others], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(after[owner == first], before[owner == first])
