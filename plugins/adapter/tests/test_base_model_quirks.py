"""What real base models ship that the tiny test models do not: a chat template without a system role, several
EOS ids in generation_config.json, a tokenizer that adds BOS itself, weights saved in bf16."""

from __future__ import annotations

import json
import shutil

import torch
from tokenizers import processors
from transformers import AutoModelForCausalLM, AutoTokenizer

from tt_engine_adapter.runtime import chat, generate, model_source

SYSTEM = {"role": "system", "content": "Classify the sentiment of the review."}
# Gemma 1-2 style: no system role (the template raises), turns end with a special token
NO_SYSTEM_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}"
    "{% if m['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
    "{{ '<|start_header_id|>' + ('model' if m['role'] == 'assistant' else m['role']) + '\n' + m['content'] + '<|eot_id|>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>model\n' }}{% endif %}"
)


def test_a_template_without_a_system_role_gets_the_system_message_in_the_first_user_turn(tiny_llama):
    tok = AutoTokenizer.from_pretrained(tiny_llama)
    tok.chat_template = NO_SYSTEM_TEMPLATE
    row = [SYSTEM, {"role": "user", "content": "great film"}, {"role": "assistant", "content": "positive"}]
    prompt = chat.render_prompt(tok, row[:2])
    assert prompt == ("<|begin_of_text|><|start_header_id|>user\nClassify the sentiment of the review.\n\ngreat film"
                      "<|eot_id|>\n<|start_header_id|>model\n")
    eot = chat.end_of_turn_id(tok)
    enc = chat.encode_row(tok, "r1", row, 256, eot)
    supervised = [t for t, label in zip(enc.input_ids, enc.labels) if label != chat.IGNORE_INDEX]
    assert tok.decode(supervised) == "positive<|eot_id|>"
    assert enc.input_ids[:len(enc.input_ids) - len(supervised)] == chat.encode_prompt(tok, row[:2], 256)[0]
    # a template with a system role keeps its own system turn
    plain = AutoTokenizer.from_pretrained(tiny_llama)
    assert "<|start_header_id|>system<|end_header_id|>\n\nClassify" in chat.render_prompt(plain, row[:2])


def test_generation_stops_on_any_eos_id_of_generation_config(tiny_llama, tmp_path):
    folder = tmp_path / "several-eos"
    shutil.copytree(tiny_llama, folder)
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    prompt = [{"id": "p", "messages": [SYSTEM, {"role": "user", "content": "the plot was dull"}]}]
    settings = dict(max_new_tokens=12, batch_size=1, max_seq_length=256, device="cpu")
    ids = torch.tensor([chat.encode_prompt(tok, prompt[0]["messages"], 256)[0]])
    with torch.inference_mode():
        free = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=12,
                              do_sample=False, eos_token_id=chat.stop_ids(tok), pad_token_id=0)[0, ids.shape[1]:].tolist()
    cut = next(k for k in range(1, len(free)) if free[k] not in free[:k])  # the first token not generated before
    config = json.loads((folder / "generation_config.json").read_text())
    config["eos_token_id"] = [chat.end_of_turn_id(tok), free[cut]]  # Llama 3.1 ships three
    (folder / "generation_config.json").write_text(json.dumps(config))
    tok = AutoTokenizer.from_pretrained(folder)
    assert free[cut] in chat.stop_ids(tok)
    answer = generate.generate(model, tok, prompt, **settings)[0]["prediction"]
    assert answer == tok.decode(free[:cut], skip_special_tokens=True).strip()


def test_a_tokenizer_that_adds_bos_itself_gets_one_bos(tiny_llama):
    """The template writes BOS; a tokenizer whose post-processor adds BOS too (Llama 2/3 tokenizer.json) must not
    give a prompt two of them."""
    tok = AutoTokenizer.from_pretrained(tiny_llama)
    bos = tok.bos_token_id
    tok.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", bos)])
    assert tok("x")["input_ids"][0] == bos  # the tokenizer does add it
    messages = [SYSTEM, {"role": "user", "content": "great"}]
    assert chat.render_prompt(tok, messages).startswith("<|begin_of_text|>")
    ids, _ = chat.encode_prompt(tok, messages, 256)
    assert ids[0] == bos and ids.count(bos) == 1
    row = chat.encode_row(tok, "r", messages + [{"role": "assistant", "content": "positive"}], 256,
                          chat.end_of_turn_id(tok))
    assert row.input_ids.count(bos) == 1


def test_a_model_saved_in_bf16_trains_in_float32_on_cpu(tiny_llama, tmp_path):
    folder = tmp_path / "bf16"
    AutoModelForCausalLM.from_pretrained(tiny_llama, dtype=torch.bfloat16).save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny_llama).save_pretrained(folder)
    assert json.loads((folder / "config.json").read_text())["dtype"] == "bfloat16"
    model = model_source.load_model(str(folder), "cpu", model_source.pick_dtype("cpu", "auto"))
    assert {p.dtype for p in model.parameters()} == {torch.float32}
