"""Chat rendering and the supervised-token mask, for two different chat templates."""

from __future__ import annotations

import re

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


# 36 tokens with the tiny tokenizers, 41-44 with the template's system markers (asserted below): with the
# templates' ~27 tokens of turn markers a row needs 62-64 tokens before any user text.
INSTRUCTION = "Classify the sentiment of the review. Follow the demonstrated behavior, one word."


def _instruction_prefix(tok, system: str) -> list[int]:
    """The row's tokens up to and including the system message's text (its template markers around it)."""
    text = chat.render_prompt(tok, [{"role": "system", "content": system}, {"role": "user", "content": "x"}])
    return chat.encode_text(tok, text[: text.index(system) + len(system)])


def test_every_training_row_starts_with_the_full_instruction_and_ends_with_the_answer(tiny_model):
    tok = AutoTokenizer.from_pretrained(tiny_model)
    eot = chat.end_of_turn_id(tok)
    prefix = _instruction_prefix(tok, INSTRUCTION)
    assert 35 <= len(chat.encode_text(tok, INSTRUCTION)) <= 45 and 35 <= len(prefix) <= 45
    users = ["great", "the plot was dull " * 3, "the acting was wonderful and the music was moving " * 6,
             "a " * 200, "terrible " * 50 + "but the ending saved it"]
    encoded = [chat.encode_row(tok, f"r{i}", [{"role": "system", "content": INSTRUCTION},
                                              {"role": "user", "content": user},
                                              {"role": "assistant", "content": answer}], 64, eot)
               for i, user in enumerate(users) for answer in ("positive", "negative")]
    for enc in encoded:
        assert len(enc.input_ids) <= 64
        assert enc.input_ids[: len(prefix)] == prefix  # the whole instruction, first
        answer = [t for t, label in zip(enc.input_ids, enc.labels) if label != chat.IGNORE_INDEX]
        assert enc.input_ids[-len(answer):] == answer and answer[-1] == eot  # the supervised answer, last
        assert tok.decode(answer[:-1]) in ("positive", "negative")
    untrimmed = [len(chat.encode_row(tok, "r", [{"role": "system", "content": INSTRUCTION},
                                                {"role": "user", "content": user},
                                                {"role": "assistant", "content": "positive"}], 4096, eot).input_ids)
                 for user in users]
    assert [enc.trimmed for enc in encoded[::2]] == [n > 64 for n in untrimmed]
    assert sum(enc.trimmed for enc in encoded) >= 6  # the count the prefetch stage reports (data.trimmed_rows)
    # a trimmed row keeps the end of its user text
    roomier = chat.encode_row(tok, "r", [{"role": "system", "content": INSTRUCTION},
                                         {"role": "user", "content": users[-1]},
                                         {"role": "assistant", "content": "positive"}], 80, eot)
    text = tok.decode(roomier.input_ids, skip_special_tokens=True)
    assert roomier.trimmed and "but the ending saved it" in text and INSTRUCTION in text


def test_instruction_and_answer_that_cannot_fit_are_refused_naming_the_setting(tiny_model):
    tok = AutoTokenizer.from_pretrained(tiny_model)
    eot = chat.end_of_turn_id(tok)
    long_instruction = INSTRUCTION + " Constraints: answer in lower case, never explain, no punctuation."
    assert 65 <= len(chat.encode_text(tok, long_instruction)) <= 80  # ~70 tokens
    with pytest.raises(chat.ChatError, match=r"hyperparameters.max_seq_length is 64, but .* need (\d+) tokens") as caught:
        chat.encode_row(tok, "long", [{"role": "system", "content": long_instruction},
                                      {"role": "user", "content": "hi"},
                                      {"role": "assistant", "content": "positive"}], 64, eot)
    needed = int(re.search(r"need (\d+) tokens", str(caught.value)).group(1))
    assert needed > 64
    fits = chat.encode_row(tok, "long", [{"role": "system", "content": long_instruction},
                                         {"role": "user", "content": "hi there"},
                                         {"role": "assistant", "content": "positive"}], needed, eot)
    assert fits.trimmed and len(fits.input_ids) == needed  # at exactly that length the user text is empty


def test_answer_that_cannot_fit_is_an_error(tiny_model):
    tok = AutoTokenizer.from_pretrained(tiny_model)
    eot = chat.end_of_turn_id(tok)
    with pytest.raises(chat.ChatError, match="max_seq_length"):
        chat.encode_row(tok, "long", _row("hi", "positive " * 20), 8, eot)


def test_evaluation_prompt_keeps_the_instruction_and_the_end_of_the_user_text(tiny_model):
    tok = AutoTokenizer.from_pretrained(tiny_model)
    messages = [{"role": "system", "content": INSTRUCTION}, {"role": "user", "content": "dull " * 80 + "the end"}]
    ids, trimmed = chat.encode_prompt(tok, messages, 80)
    assert trimmed and len(ids) <= 80 and ids[: len(_instruction_prefix(tok, INSTRUCTION))] == \
        _instruction_prefix(tok, INSTRUCTION)
    text = tok.decode(ids, skip_special_tokens=True)
    assert "dull the end" in text and 0 < text.count("dull") < 80 and INSTRUCTION in text


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
