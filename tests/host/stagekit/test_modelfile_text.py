"""The Ollama Modelfile never carries what Ollama would read differently (tt_stagekit.gguf.modelfile): an
invisible format character (category Cf, e.g. U+200B, U+2066) in the system message, a template piece or a stop
token is refused (Ollama's parser drops them, so Ollama would serve another message), and so is a template piece
ending in `{` (it joins the Go template's next `{{` into `{{{`)."""

from __future__ import annotations

import pytest

from tt_stagekit.gguf.modelfile import ChatFormat, ChatFormatError, go_template, modelfile

CHATML = ChatFormat("", {"system": ("<|im_start|>system\n", "<|im_end|>\n"),
                         "user": ("<|im_start|>user\n", "<|im_end|>\n"),
                         "assistant": ("<|im_start|>assistant\n", "<|im_end|>\n")}, "<|im_start|>assistant\n")


def test_a_plain_chat_format_and_system_message_are_written():
    text = modelfile("model.gguf", CHATML, "Answer briefly.", ["<|im_end|>"], 2048)
    assert 'SYSTEM """Answer briefly."""' in text and "{{{" not in text


@pytest.mark.parametrize("char", ["\u200b", "\u2060", "\u2066", "\u202e", "\ufeff", "\u00ad"])
def test_an_invisible_character_in_the_system_message_or_a_stop_token_is_refused(char):
    with pytest.raises(ChatFormatError, match=f"U\\+{ord(char):04X}"):
        modelfile("model.gguf", CHATML, f"Answer{char} briefly.", ["<|im_end|>"], 2048)
    with pytest.raises(ChatFormatError, match=f"stop token .*U\\+{ord(char):04X}"):
        modelfile("model.gguf", CHATML, "Answer briefly.", [f"<|im_end|>{char}"], 2048)
    hidden = ChatFormat("", {**CHATML.roles, "user": (f"<|im_start|>user{char}\n", "<|im_end|>\n")}, CHATML.generation)
    with pytest.raises(ChatFormatError, match="user text"):
        go_template(hidden)


@pytest.mark.parametrize("role", ["system", "user", "assistant"])
def test_a_template_piece_ending_in_a_brace_is_refused(role):
    prefix, suffix = CHATML.roles[role]
    broken = ChatFormat("", {**CHATML.roles, role: (prefix + "{", suffix)}, CHATML.generation)
    with pytest.raises(ChatFormatError, match="ends in '\\{'"):
        go_template(broken)
    with pytest.raises(ChatFormatError, match="ends in '\\{'"):
        go_template(ChatFormat("{", CHATML.roles, CHATML.generation))
