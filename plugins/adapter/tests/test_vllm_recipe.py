"""docs/serving.md's vLLM recipe, run for real where vLLM and a CUDA GPU exist (skips with the reason otherwise).

A merged export (`tt models export --merged`, here `python -m tt_engine_adapter.stages.export`) must load in vLLM as
it is, and a PEFT adapter folder must load with `--enable-lora`; both must give the greedy answers
transformers/PEFT give for the same prompt. vLLM is not installed in the engine's environment (it pins its own
torch); install it next to the engine's packages on a GPU machine to run this file."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from test_export_merged import make_adapter, run_export

needs = []
if importlib.util.find_spec("vllm") is None:
    needs.append("vLLM is not installed (pip install vllm on a GPU machine)")
if not torch.cuda.is_available():
    needs.append("no CUDA device")
pytestmark = pytest.mark.skipif(bool(needs), reason="; ".join(needs) or "runs")

PROMPT = [{"role": "system", "content": "Classify the sentiment of the movie review."},
          {"role": "user", "content": "A wonderful film."}]
NEW_TOKENS = 8


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    from tt_engine_adapter.testing.tiny_model import build

    tmp = tmp_path_factory.mktemp("vllm")
    # head_dim 64: vLLM's attention backends want a standard head size.
    base = build(tmp / "base", arch="llama", hidden=256, layers=2)
    adapter = make_adapter(base, tmp / "adapter")
    merged = tmp / "merged"
    done = run_export(tmp, adapter, merged)
    assert done.returncode == 0, done.stdout + done.stderr
    return base, adapter, merged


def reference_tokens(model, tokenizer) -> list[int]:
    ids = tokenizer.apply_chat_template(PROMPT, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    out = model.generate(**ids, max_new_tokens=NEW_TOKENS, do_sample=False)
    return out[0, ids["input_ids"].shape[1]:].tolist()


def vllm_tokens(llm, tokenizer, **kwargs) -> list[int]:
    from vllm import SamplingParams

    prompt = tokenizer.apply_chat_template(PROMPT, add_generation_prompt=True, tokenize=False)
    params = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=False)
    return list(llm.generate([prompt], params, **kwargs)[0].outputs[0].token_ids)


def test_merged_export_loads_in_vllm_unchanged_and_answers_like_transformers(folders):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from vllm import LLM

    _, _, merged = folders
    tokenizer = AutoTokenizer.from_pretrained(merged)
    expected = reference_tokens(AutoModelForCausalLM.from_pretrained(merged, dtype=torch.float32), tokenizer)
    llm = LLM(model=str(merged), dtype="float32", enforce_eager=True, max_model_len=256, gpu_memory_utilization=0.2)
    assert vllm_tokens(llm, tokenizer) == expected


def test_adapter_loads_with_enable_lora_and_answers_like_peft(folders):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from vllm import LLM
    from vllm.lora.request import LoRARequest

    base, adapter, _ = folders
    tokenizer = AutoTokenizer.from_pretrained(base)
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32), adapter)
    expected = reference_tokens(model, tokenizer)
    llm = LLM(model=str(base), dtype="float32", enforce_eager=True, max_model_len=256, gpu_memory_utilization=0.2,
              enable_lora=True, max_lora_rank=8)
    assert vllm_tokens(llm, tokenizer, lora_request=LoRARequest("tuned", 1, str(adapter))) == expected
