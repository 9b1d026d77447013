"""Padding is masked by position, never by token id: a model whose pad token is EOS / end-of-turn (or that has
none) trains and generates as shipped, and the end-of-turn token it shares with the padding keeps its label."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from tt_engine_adapter.runtime import batches, chat, generate
from tt_engine_adapter.runtime import train as loop
from tt_engine_adapter.runtime.config import AdapterSettings

SYSTEM = {"role": "system", "content": "Classify the sentiment of the review."}
HP = AdapterSettings(lora_dropout=0.0, lora_rank=4, max_seq_length=256)


def _rows(tok) -> list[chat.Encoded]:
    eot = chat.end_of_turn_id(tok)
    return [chat.encode_row(tok, f"r{i}", [SYSTEM, {"role": "user", "content": user},
                                           {"role": "assistant", "content": answer}], 256, eot)
            for i, (user, answer) in enumerate([("great", "positive"), ("the plot was dull and slow " * 3, "negative"),
                                                 ("fine", "positive")])]


def _pad_is(tok, what: str):
    """The tokenizer as a model would ship it: pad = end-of-turn (SmolLM2, Qwen2.5 base), pad = EOS, or none."""
    if what == "end-of-turn":
        tok.pad_token = tok.convert_ids_to_tokens(chat.end_of_turn_id(tok))
    elif what == "EOS":
        tok.pad_token = tok.eos_token
    else:
        tok.pad_token = None
    return tok


def test_the_padding_choice_as_shipped(tiny_llama):
    tok = AutoTokenizer.from_pretrained(tiny_llama)
    assert chat.padding(tok).dedicated and chat.padding(tok).id not in (tok.eos_token_id, chat.end_of_turn_id(tok))
    eot = chat.end_of_turn_id(tok)
    assert tok.eos_token_id == eot  # Llama-3 instruct style: <|eot_id|> is EOS and end-of-turn
    assert chat.padding(_pad_is(tok, "end-of-turn")).record() == {
        "id": eot, "token": "<|eot_id|>", "source": "pad token = EOS", "masked_by": "position"}
    tok.eos_token = "<|begin_of_text|>"  # an EOS of its own: the pad is then the end-of-turn token alone
    assert chat.padding(tok).source == "pad token = end-of-turn"
    none = chat.padding(_pad_is(tok, None))
    assert (none.id, none.source, none.dedicated) == (tok.eos_token_id, "EOS", False)
    assert "masked by position" in none.note() and "no pad token" in none.note()


@pytest.mark.parametrize("packing", [False, True])
def test_an_end_of_turn_that_is_also_the_pad_keeps_its_label(tiny_llama, packing):
    tok = _pad_is(AutoTokenizer.from_pretrained(tiny_llama), "end-of-turn")
    rows = _rows(tok)
    eot = chat.end_of_turn_id(tok)
    assert chat.pad_token_id(tok) == eot and all(r.labels[-1] == eot for r in rows)
    batch = batches.collate(rows, eot, packing, 256)
    ids, labels, owner = batch.inputs["input_ids"], batch.inputs["labels"], batch.row_of_token
    # every row's supervised tokens, its end-of-turn included, are labels of the batch: nothing is dropped
    # because it has the pad's id ...
    assert int((labels != chat.IGNORE_INDEX).sum()) == sum(r.supervised for r in rows)
    assert int(((labels == eot) & (owner >= 0)).sum()) == len(rows)
    # ... and the padding (the positions no row owns), which has the same id, has none, nor attention
    pad_positions = owner < 0
    assert pad_positions.any() or packing
    assert (ids[pad_positions] == eot).all()
    assert (labels[pad_positions] == chat.IGNORE_INDEX).all()
    if not packing:
        assert (batch.inputs["attention_mask"] == (owner >= 0).long()).all()


def test_the_padded_loss_is_the_rows_own_loss_when_pad_is_end_of_turn(tiny_llama):
    """The loss of a right-padded batch equals the loss of its rows fed one at a time without padding: the
    end-of-turn labels count, the pad positions do not (by id, the loss would lose each row's last target)."""
    tok = _pad_is(AutoTokenizer.from_pretrained(tiny_llama), "end-of-turn")
    rows = _rows(tok)
    torch.manual_seed(0)
    model = loop.wrap_lora(AutoModelForCausalLM.from_pretrained(tiny_llama, dtype=torch.float32), HP).eval()
    targets = loop.supervised_targets(rows)
    with torch.no_grad():
        padded = model(**batches.collate(rows, chat.pad_token_id(tok)).inputs, use_cache=False,
                       num_items_in_batch=targets).loss
        alone = sum(model(input_ids=torch.tensor([r.input_ids]), labels=torch.tensor([r.labels]), use_cache=False,
                          num_items_in_batch=targets).loss for r in rows)
    torch.testing.assert_close(padded, alone, atol=1e-5, rtol=1e-5)


def _alone(model, tok, messages, max_new_tokens: int) -> str:
    """The answer to one prompt fed unpadded, every position attended (no padding to find at all)."""
    ids = torch.tensor([chat.encode_prompt(tok, messages, 256)[0]])
    stops = generate.stop_ids(tok)
    with torch.inference_mode():
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                             do_sample=False, eos_token_id=stops, pad_token_id=stops[0])
    new = out[0, ids.shape[1]:].tolist()
    new = new[:next((k for k, t in enumerate(new) if t in stops), len(new))]
    return tok.decode(new, skip_special_tokens=True).strip()


def test_generation_with_pad_equal_to_eos_answers_as_one_at_a_time(tiny_llama):
    """Left padding filled with EOS is masked by position: a batch of prompts of different lengths gives each
    prompt the answer it gets alone, unpadded. (By id, the template's own <|eot_id|> after the system message
    would be masked too.)"""
    tok = _pad_is(AutoTokenizer.from_pretrained(tiny_llama), None)
    model = AutoModelForCausalLM.from_pretrained(tiny_llama, dtype=torch.float32)
    prompts = [{"id": f"p{i}", "messages": [SYSTEM, {"role": "user", "content": text}]}
               for i, text in enumerate(["great", "the plot was dull and slow " * 4, "fine film"])]
    batched = generate.generate(model, tok, prompts, batch_size=3, max_new_tokens=8, max_seq_length=256, device="cpu")
    assert [b["prediction"] for b in batched] == [_alone(model, tok, p["messages"], 8) for p in prompts]
