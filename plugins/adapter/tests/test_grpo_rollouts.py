"""GRPO's rollout generator (runtime/rollouts.py, the serving engine's batching and KV cache in-process): greedy
answers equal HF `generate` token for token, and a sample's tokens depend on its seed, not on its batch."""

from __future__ import annotations

import torch

from tt_engine_adapter.runtime import chat, model_source
from tt_engine_adapter.runtime.rollouts import Generator, Sample

TEXTS = ["the film was great", "i thought the plot was dull and far too long for what it had to say", "ok"]


def _setup(folder):
    tokenizer = model_source.load_tokenizer(str(folder))
    model = model_source.load_model(str(folder), "cpu", torch.float32).eval()
    prompts = [chat.encode_prompt(tokenizer, [{"role": "system", "content": "Classify."},
                                              {"role": "user", "content": t}], 200)[0] for t in TEXTS]
    return tokenizer, model, prompts


def _generator(tokenizer, model, max_batch):
    return Generator(model, chat.stop_ids(tokenizer), chat.pad_token_id(tokenizer), "cpu", max_batch)


def test_greedy_rollouts_equal_hf_generate(tiny_model):
    tokenizer, model, prompts = _setup(tiny_model)
    samples = [Sample(p, seed) for p in prompts for seed in (1, 2)]
    answers = _generator(tokenizer, model, 3).sample(samples, 12, 0.0)
    stops = chat.stop_ids(tokenizer)
    for sample, answer in zip(samples, answers):
        out = model.generate(torch.tensor([sample.prompt]), max_new_tokens=12, do_sample=False, eos_token_id=stops,
                             pad_token_id=chat.pad_token_id(tokenizer))
        assert out[0, len(sample.prompt):].tolist() == answer


def test_a_sample_depends_on_its_seed_not_its_batch(tiny_llama):
    tokenizer, model, prompts = _setup(tiny_llama)
    samples = [Sample(p, 100 + i) for i, p in enumerate(prompts * 3)]
    one = _generator(tokenizer, model, 1).sample(samples, 10, 1.0)
    generator = _generator(tokenizer, model, 4)
    four = generator.sample(samples, 10, 1.0)
    assert one == four
    assert generator.stats.max_rows == 4 and generator.stats.prefills < len(samples)  # a group shares its prefill
    assert len({tuple(a) for a in four}) > len(prompts)  # sampling, not one answer per prompt
