"""Chat rendering and the supervised-token mask, for two different chat templates."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from tt_engine_adapter.runtime import chat

SYSTEM = {"role": "system", "content": "Classify the sentiment of the review."}


def _row(user: str, answer: str) -> list[dict]:
    return [SYSTEM, {"role": "user", "content": user}, {"role": "assistant", "content": answer}]


def test_mask_covers_exactly_answer_and_end_of_turn(tiny_model):
    tok = AutoTokenizer.from_pretrained(tiny_model)
    eot = chat.end_of_turn_id(tok)
    enc = chat.encode_row(tok, "r1", _row("the film was great", "positive"), 256, eot)
    supervised = [(i, t) for i, (t, l) in enumerate(zip(enc.input_ids, enc.labels)) if l != chat.IGNORE_INDEX]
    positions = [i for i, _ in supervised]
    # contiguous, at the very end, ending with the end-of-turn token
    assert positions == list(range(len(enc.input_ids) - len(positions), len(enc.input_ids)))
    ids = [t for _, t in supervised]
    assert ids[-1] == eot
    assert tok.decode(ids[:-1]) == "positive"
    assert all(label == token for token, label in zip(enc.input_ids, enc.labels) if label != chat.IGNORE_INDEX)
    # the unsupervised prefix is exactly the rendered generation prompt used at evaluation time
    prompt_ids, _ = chat.encode_prompt(tok, _row("the film was great", "positive")[:2], 256)
    assert enc.input_ids[: len(enc.input_ids) - len(ids)] == prompt_ids


def test_two_templates_really_differ(tiny_llama, tiny_qwen3):
    llama, qwen = AutoTokenizer.from_pretrained(tiny_llama), AutoTokenizer.from_pretrained(tiny_qwen3)
    assert llama.convert_ids_to_tokens(chat.end_of_turn_id(llama)) == "<|eot_id|>"
    assert qwen.convert_ids_to_tokens(chat.end_of_turn_id(qwen)) == "<|im_end|>"
    # Qwen3-style template: thinking switched off renders the empty think block in the prompt
    assert chat.render_prompt(qwen, _row("x", "y")[:2]).endswith("<think>\n\n</think>\n\n")


def test_dedicated_pad_token_is_not_eos(tiny_model):
    tok = AutoTokenizer.from_pretrained(tiny_model)
    pad = chat.pad_token_id(tok)
    assert pad not in (tok.eos_token_id, chat.end_of_turn_id(tok))


def test_pad_equal_to_eos_is_refused(tiny_llama):
    tok = AutoTokenizer.from_pretrained(tiny_llama)
    tok.pad_token = tok.eos_token
    with pytest.raises(chat.ChatError, match="pad token"):
        chat.pad_token_id(tok)


def test_oldest_prompt_tokens_are_truncated_first(tiny_model):
    tok = AutoTokenizer.from_pretrained(tiny_model)
    eot = chat.end_of_turn_id(tok)
    full = chat.encode_row(tok, "r", _row("the plot was dull " * 8, "negative"), 4096, eot)
    answer_len = full.supervised
    short = chat.encode_row(tok, "r", _row("the plot was dull " * 8, "negative"), answer_len + 5, eot)
    assert len(short.input_ids) == answer_len + 5
    assert short.truncated == len(full.input_ids) - len(short.input_ids)
    assert short.input_ids == full.input_ids[short.truncated:]  # the newest tokens survive
    assert short.labels == full.labels[short.truncated:]


def test_answer_that_cannot_fit_is_an_error(tiny_model):
    tok = AutoTokenizer.from_pretrained(tiny_model)
    eot = chat.end_of_turn_id(tok)
    with pytest.raises(chat.ChatError, match="cannot fit"):
        chat.encode_row(tok, "long", _row("hi", "positive " * 20), 8, eot)


def test_answer_without_supervised_token_is_an_error(tiny_model):
    tok = AutoTokenizer.from_pretrained(tiny_model)
    eot = chat.end_of_turn_id(tok)
    with pytest.raises(chat.ChatError, match="no supervised token"):
        chat.encode_row(tok, "empty", _row("hi", ""), 256, eot)


def test_template_that_cannot_render_is_an_error(tiny_llama):
    tok = AutoTokenizer.from_pretrained(tiny_llama)
    tok.chat_template = "{{ raise_exception('this template refuses every conversation') }}"
    with pytest.raises(chat.ChatError, match="cannot render"):
        chat.encode_row(tok, "r", _row("hi", "positive"), 256, 0)
    tok.chat_template = None
    with pytest.raises(chat.ChatError, match="no chat template"):
        chat.render_prompt(tok, _row("hi", "x")[:2])
