"""tt_stagekit.promptfit: instruction and answer kept whole, user text trimmed, oldest turns first, counts."""

from __future__ import annotations

import pytest

from tt_stagekit.promptfit import PromptTooLong, fit_chat, length_message, words


def count(messages: list[dict]) -> int:
    """A stand-in tokenizer: one token per character (so trims are exact) plus two per message."""
    return sum(len(m["content"]) + 2 for m in messages)


SYSTEM = {"role": "system", "content": "S" * 20}


def row(user: str, answer: str = "ANSWER") -> list[dict]:
    return [SYSTEM, {"role": "user", "content": user}, {"role": "assistant", "content": answer}]


def test_a_row_that_fits_is_untouched():
    messages = row("hello there")
    fitted = fit_chat(messages, count, 100, keep_answer=True)
    assert fitted.messages == messages and not fitted.trimmed and fitted.length == count(messages)


def test_training_row_keeps_instruction_and_answer_and_trims_the_start_of_the_user_text():
    user = "".join(chr(ord("a") + i % 26) for i in range(60))
    fitted = fit_chat(row(user), count, 50, keep_answer=True)
    system, kept_user, answer = fitted.messages
    assert system == SYSTEM and answer == {"role": "assistant", "content": "ANSWER"}
    assert fitted.length == 50 == count(fitted.messages)  # the longest text that fits
    assert user.endswith(kept_user["content"]) and len(kept_user["content"]) == 50 - 6 - 20 - 6
    assert fitted.trimmed and fitted.trimmed_chars == 60 - len(kept_user["content"]) and fitted.dropped_turns == 0


def test_instruction_plus_answer_that_cannot_fit_is_refused_with_the_length_needed():
    with pytest.raises(PromptTooLong) as caught:
        fit_chat(row("hi", answer="A" * 40), count, 60, keep_answer=True)
    assert caught.value.needed == 22 + 2 + 42 and caught.value.limit == 60
    # exactly at the floor: the user text becomes empty, nothing else changes
    fitted = fit_chat(row("hi", answer="A" * 40), count, 66, keep_answer=True)
    assert fitted.messages[1]["content"] == "" and fitted.messages[2]["content"] == "A" * 40


def test_serving_drops_the_oldest_whole_turns_first_then_trims_the_last_user_text():
    conversation = [SYSTEM]
    for turn in range(4):
        conversation += [{"role": "user", "content": f"question {turn} " * 3},
                         {"role": "assistant", "content": f"answer {turn}"}]
    conversation.append({"role": "user", "content": "the last question"})
    full = count(conversation)
    turn_size = count(conversation[1:3])
    fitted = fit_chat(conversation, count, full - turn_size - 1, keep_answer=False)
    assert fitted.dropped_turns == 2 and fitted.trimmed_chars == 0
    assert fitted.messages == [SYSTEM] + conversation[5:]  # turns 0 and 1 gone, 2 and 3 kept whole

    fitted = fit_chat(conversation, count, count([SYSTEM]) + 2 + 8, keep_answer=False)
    assert fitted.dropped_turns == 4 and fitted.messages[0] == SYSTEM
    assert fitted.messages[1:] == [{"role": "user", "content": "question"}] and fitted.trimmed_chars == 9

    with pytest.raises(PromptTooLong):
        fit_chat(conversation, count, count([SYSTEM]) + 1, keep_answer=False)


def test_system_messages_inside_a_conversation_are_never_dropped():
    conversation = [SYSTEM, {"role": "user", "content": "u" * 30}, {"role": "system", "content": "keep me"},
                    {"role": "assistant", "content": "a" * 30}, {"role": "user", "content": "last"}]
    fitted = fit_chat(conversation, count, count(conversation) - 10, keep_answer=False)
    assert [m["content"] for m in fitted.messages] == [SYSTEM["content"], "keep me", "last"]


def test_trimmed_rows_are_counted_by_the_caller():
    rows = [row("short"), row("x" * 80), row("y" * 200), row("z")]
    fitted = [fit_chat(r, count, 60, keep_answer=True) for r in rows]
    assert sum(f.trimmed for f in fitted) == 2
    assert all(f.length <= 60 and f.messages[0] == SYSTEM and f.messages[-1]["content"] == "ANSWER" for f in fitted)


def test_malformed_chats_are_refused():
    with pytest.raises(ValueError, match="end with the assistant answer"):
        fit_chat(row("x" * 80)[:2], count, 10, keep_answer=True)
    with pytest.raises(ValueError, match="user message"):
        fit_chat([SYSTEM, {"role": "assistant", "content": "x" * 80}], count, 10, keep_answer=False)


def test_words_is_a_whitespace_piece_count_and_the_message_names_the_field():
    assert words("a  b\tc\nd") == 4 and words("") == 0 and words("  ") == 0
    assert words("caf\u00e9 \u00fcber\u3000x") == 2  # only ASCII whitespace separates (a tokenizer may join the rest)
    message = length_message("foundation.sequence_length", 80, 64)
    assert "foundation.sequence_length is 64" in message and "need 80 tokens" in message
