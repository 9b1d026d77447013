"""Multi-turn chat rows: loss on exactly the assistant turns' tokens plus their end-of-turn token.

Tokenizers are built here (tiny byte-level BPE, tt_engine_adapter.testing.tiny_model) with a Llama-3-style
template and a Qwen3-style one that, like Qwen3's own, writes the empty thinking block only in the last
assistant turn and wraps tool results in a user turn. No model is needed.
"""

from __future__ import annotations

import pytest

from tt_engine_adapter.runtime import chat
from tt_engine_adapter.testing.tiny_model import SPECIALS, build_tokenizer

QWEN3_REAL_STYLE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}"
    "{{ '<|im_start|>assistant\n' }}{% if loop.last %}{{ '<think>\n\n</think>\n\n' }}{% endif %}"
    "{{ message['content'] + '<|im_end|>\n' }}"
    "{% elif message['role'] == 'tool' %}"
    "{{ '<|im_start|>user\n<tool_response>\n' + message['content'] + '\n</tool_response><|im_end|>\n' }}"
    "{% else %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
    "{% if enable_thinking is defined and enable_thinking is false %}{{ '<think>\n\n</think>\n\n' }}{% endif %}"
    "{% endif %}"
)

CHAT = [
    {"role": "system", "content": "Classify the sentiment of the review."},
    {"role": "user", "content": "the film was great"},
    {"role": "assistant", "content": "positive"},
    {"role": "user", "content": "look up the plot"},
    {"role": "assistant", "content": "calling the lookup tool"},
    {"role": "tool", "content": "the plot was dull"},
    {"role": "assistant", "content": "negative"},
]


@pytest.fixture(scope="module", params=["llama", "qwen3"])
def tok(request):
    tokenizer = build_tokenizer(request.param)
    if request.param == "qwen3":
        tokenizer.chat_template = QWEN3_REAL_STYLE
    return tokenizer


def _supervised_runs(enc: chat.Encoded) -> list[list[int]]:
    runs, current = [], []
    for token, label in zip(enc.input_ids, enc.labels):
        if label != chat.IGNORE_INDEX:
            assert label == token
            current.append(token)
        elif current:
            runs.append(current)
            current = []
    return runs + ([current] if current else [])


@pytest.mark.parametrize("turns", ["all", "last"])
def test_loss_on_exactly_the_assistant_turns(tok, turns):
    eot = chat.end_of_turn_id(tok)
    eot_text = tok.convert_ids_to_tokens(eot)
    enc = chat.encode_row(tok, "r1", CHAT, 512, eot, turns=turns)
    answers = [m["content"] for m in CHAT if m["role"] == "assistant"]
    expected = answers if turns == "all" else answers[-1:]
    assert [tok.decode(run) for run in _supervised_runs(enc)] == [a + eot_text for a in expected]
    # the row is the whole rendering up to the last end-of-turn, nothing lost or added between pieces
    full = chat.render_conversation(tok, CHAT)
    assert tok.decode(enc.input_ids) == full[: full.rindex(eot_text) + len(eot_text)]
    # the last answer's prompt is exactly the evaluation-time prompt
    prompt_ids, _ = chat.encode_prompt(tok, CHAT[:-1], 512)
    assert enc.input_ids[: len(prompt_ids)] == prompt_ids
    assert enc.labels[len(prompt_ids):] == enc.input_ids[len(prompt_ids):]


def test_too_long_chat_drops_oldest_turns_first(tok):
    eot = chat.end_of_turn_id(tok)
    whole = chat.encode_row(tok, "r1", CHAT[:5], 512, eot)
    fitted = chat.encode_row(tok, "r1", CHAT[:5], len(whole.input_ids) - 1, eot)
    assert fitted.trimmed and len(fitted.input_ids) < len(whole.input_ids)
    assert [tok.decode(run) for run in _supervised_runs(fitted)] == ["calling the lookup tool" + tok.convert_ids_to_tokens(eot)]
    assert tok.decode(fitted.input_ids).count("Classify the sentiment of the review.") == 1
