"""The Ollama Modelfile never carries what Ollama would read differently (tt_stagekit.gguf.modelfile): an
invisible format character (category Cf, e.g. U+200B, U+2066) in the system message, a template piece or a stop
token is refused (Ollama's parser drops them, so Ollama would serve another message), and so is a template piece
ending in `{` (it joins the Go template's next `{{` into `{{{`)."""

from __future__ import annotations

import pytest

from tt_stagekit.gguf import gotemplate
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


# The Go template's own text, rendered by tt_stagekit.gguf.gotemplate, equals the format's pieces for each shape a
# real template takes (a default system turn, a system message folded into the first user turn, a head).
SHAPES = {"chatml": CHATML,
          "default system": ChatFormat("", CHATML.roles, CHATML.generation,
                                       no_system="<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"),
          "folded": ChatFormat("<bos>", {"system": ("", ""), "user": ("<start_of_turn>user\n", "<end_of_turn>\n"),
                                         "assistant": ("<start_of_turn>model\n", "<end_of_turn>\n")},
                               "<start_of_turn>model\n", fold=("", "\n\n"))}
CHATS = [[{"role": "system", "content": "S"}, {"role": "user", "content": "U"}],
         [{"role": "user", "content": "U"}, {"role": "assistant", "content": "A"}, {"role": "user", "content": "V"}],
         [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}, {"role": "assistant", "content": "A"}]]


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_the_go_template_renders_what_the_pieces_render(shape):
    chat = SHAPES[shape]
    for messages in CHATS:
        assert gotemplate.render(go_template(chat), messages) == chat.render(messages, True), messages


def test_the_default_system_turn_is_written_only_when_the_chat_has_none():
    chat = SHAPES["default system"]
    assert chat.default_system_message() == "You are a helpful assistant."
    assert gotemplate.render(go_template(chat), CHATS[0]).count("<|im_start|>system") == 1
    assert "helpful" in gotemplate.render(go_template(chat), CHATS[1])
    assert "helpful" not in gotemplate.render(go_template(chat), CHATS[0])


def test_the_renderer_refuses_what_it_does_not_read():
    with pytest.raises(ValueError):
        gotemplate.render("{{ range .Messages }}{{ .Content }}{{ end }}{{ printf \"%s\" .Role }}", CHATS[0])
    with pytest.raises(ValueError):
        gotemplate.render("{{ if eq .Role \"user\" }}x", CHATS[0])
