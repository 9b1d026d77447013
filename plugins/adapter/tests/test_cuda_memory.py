"""CUDA-only memory savers, run on a machine with an NVIDIA GPU (skipped with the reason elsewhere).

QLoRA (`load_in_4bit`): the tiny model trains on a 4-bit NF4 base, and plain PEFT on a 4-bit base loaded
with the same BitsAndBytesConfig reproduces tt's answers. fp16 (`precision: fp16`): training runs with
a gradient scaler and the loss falls.
"""

from __future__ import annotations

import pytest
import torch

from tt_engine_adapter.testing.harness import sentiment_run

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="needs a CUDA GPU (4-bit QLoRA and fp16 with a gradient scaler are CUDA-only)")

HP = {"n_epochs": 6, "learning_rate": 5e-3, "batch_size": 8, "lora_rank": 8, "lora_dropout": 0.0,
      "max_seq_length": 128, "max_new_tokens": 6, "seed": 3}


def test_qlora_trains_and_plain_peft_on_a_4bit_base_reproduces_tt(tmp_path, tiny_llama):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer, BitsAndBytesConfig

    run = sentiment_run(tmp_path / "run", str(tiny_llama), {**HP, "load_in_4bit": True}, n_train=48, n_eval=8)
    events = {stage: run.stage(stage, device="cuda")["events"] for stage in ("prepare", "prefetch", "train", "candidate")}
    train = run.done["train"]["result"]
    assert train["metrics"]["train.final_loss"] < train["series"]["train.loss"][0][1]
    assert any("4-bit NF4 base" in e.get("message", "") for e in events["train"])

    dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    config = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                                bnb_4bit_compute_dtype=dtype)
    base = AutoModelForCausalLM.from_pretrained(tiny_llama, quantization_config=config, dtype=dtype,
                                                device_map={"": 0})
    model = PeftModel.from_pretrained(base, train["outputs"]["adapter"]).eval()
    tok = AutoTokenizer.from_pretrained(tiny_llama)
    expected = run.predictions("candidate")
    for prompt in run.eval_prompts:
        text = tok.apply_chat_template(prompt["messages"], tokenize=False, add_generation_prompt=True,
                                       enable_thinking=False)
        ids = tok(text, add_special_tokens=False, return_tensors="pt").to("cuda")
        out = model.generate(**ids, max_new_tokens=6, do_sample=False, pad_token_id=tok.pad_token_id,
                             eos_token_id=tok.convert_tokens_to_ids("<|eot_id|>"))
        answer = tok.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True).strip()
        assert answer == expected[prompt["id"]]


def test_fp16_trains_with_a_gradient_scaler(tmp_path, tiny_llama):
    run = sentiment_run(tmp_path / "run", str(tiny_llama), {**HP, "precision": "fp16", "n_epochs": 3},
                        n_train=32, n_eval=4)
    for stage in ("prepare", "prefetch"):
        run.stage(stage, device="cuda")
    done = run.stage("train", device="cuda")
    assert any("(float16" in e.get("message", "") for e in done["events"])
    series = done["result"]["series"]["train.loss"]
    assert all(v == v and v < float("inf") for _, v in series)  # the scaler skipped any overflowing step
    assert series[-1][1] < series[0][1]
