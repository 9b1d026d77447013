"""The Ollama Modelfile's TEMPLATE renders a conversation exactly as the model's Hugging Face chat template does:
on the templates of real model families (fixtures/chat_templates, sources in its README) and on the real base's
Ollama export (SmolLM2-135M-Instruct, whose template writes a default system message when the chat has none).

The Modelfile's own text is rendered by tt_stagekit.gguf.gotemplate (Go's text/template, the part tt writes) and
compared with `apply_chat_template` (through tt's one rendering path, runtime.chat, which folds a system message
into the first user turn for a template without a system role).
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from tt_engine_adapter.runtime import chat
from tt_stagekit.gguf import gotemplate, modelfile

FIXTURES = json.loads((Path(__file__).parent / "fixtures" / "chat_templates" / "templates.json").read_text())
REFUSED = {"mistral-nemo-instruct-2407": (51, "loop.last and system_message")}
CONVERSATIONS = modelfile.CHECK_CONVERSATIONS + [
    [{"role": "user", "content": "Rate: the film was great"}],
    [{"role": "system", "content": "Answer in one word.\nNo punctuation."}, {"role": "user", "content": "Sky colour?"},
     {"role": "assistant", "content": "Blue"}, {"role": "user", "content": "Grass?"},
     {"role": "assistant", "content": "Green"}, {"role": "user", "content": "Snow?"}]]


def template_of(modelfile_text: str) -> str:
    return re.search(r'^TEMPLATE """(.*?)"""$', modelfile_text, re.M | re.S).group(1)


@pytest.fixture(scope="module")
def tokenizer(tiny_llama):
    return AutoTokenizer.from_pretrained(tiny_llama)


def with_template(tokenizer, name):
    fixture = FIXTURES[name]
    tokenizer.chat_template, tokenizer.bos_token, tokenizer.eos_token = (fixture["template"], fixture["bos"],
                                                                          fixture["eos"])
    return tokenizer


@pytest.mark.parametrize("name", sorted(set(FIXTURES) - set(REFUSED)))
def test_each_real_family_renders_through_the_modelfile_as_its_template_does(name, tokenizer):
    tok = with_template(tokenizer, name)
    found = modelfile.derive(lambda messages, add: chat._apply(tok, messages, add), tok.chat_template)
    template = template_of(modelfile.modelfile("model.gguf", found, None, [FIXTURES[name]["eos"]], 2048))
    for conversation in CONVERSATIONS:
        assert gotemplate.render(template, conversation) == chat.render_prompt(tok, conversation), conversation


def test_a_template_that_moves_the_system_message_to_the_last_turn_is_refused_naming_the_line(tokenizer):
    tok = with_template(tokenizer, "mistral-nemo-instruct-2407")
    line, text = REFUSED["mistral-nemo-instruct-2407"]
    with pytest.raises(modelfile.ChatFormatError) as refused:
        modelfile.derive(lambda messages, add: chat._apply(tok, messages, add), tok.chat_template)
    message = str(refused.value)
    assert f"line {line}:" in message and text in message and "--format gguf" in message, message


def test_the_default_system_message_is_the_templates_own_when_the_spec_has_none(tokenizer):
    tok = with_template(tokenizer, "qwen2.5-instruct")
    found = modelfile.derive(lambda messages, add: chat._apply(tok, messages, add), tok.chat_template)
    assert found.default_system_message() == "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
    text = modelfile.modelfile("model.gguf", found, None, ["<|im_end|>"], 2048)
    assert "SYSTEM" not in text and "You are Qwen" in template_of(text)


def test_the_real_models_ollama_folder_renders_as_its_hugging_face_template(real_base, real_run, tmp_path):
    """`tt models export --format ollama` of the run trained on SmolLM2-135M-Instruct (its engine stage): the
    Modelfile's TEMPLATE renders chats with and without a system message, one and several turns, as
    `apply_chat_template` does; Ollama adds SYSTEM (the spec's message) to a chat without one, which renders as the
    chat with the spec's system message."""
    from tt_engine_adapter.stages import export_gguf

    system = real_run.system
    export_gguf.export({"source": real_run.done["train"]["result"]["outputs"]["adapter"], "model_id": "real",
                        "system_message": system, "system_message_sha256": hashlib.sha256(system.encode()).hexdigest(),
                        "out": str(tmp_path / "ollama"), "format": "ollama", "quant": "q8_0"})
    text = (tmp_path / "ollama" / "Modelfile").read_text()
    template = template_of(text)
    assert f'SYSTEM """{system}"""' in text
    tok = AutoTokenizer.from_pretrained(real_base)
    for conversation in CONVERSATIONS:
        want = tok.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)
        assert gotemplate.render(template, conversation) == want, conversation
    assert "named SmolLM" in gotemplate.render(template, CONVERSATIONS[1])  # the template's own default
    plain = [m for m in CONVERSATIONS[0] if m["role"] != "system"]
    ollama_view = [{"role": "system", "content": system}] + plain  # what Ollama sends with SYSTEM set
    assert gotemplate.render(template, ollama_view) == tok.apply_chat_template(
        [{"role": "system", "content": system}] + plain, tokenize=False, add_generation_prompt=True)
