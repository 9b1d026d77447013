"""GRPO's rollout generator (runtime/rollouts.py, the server's decoder `decode/` in-process): greedy
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


def test_rollouts_and_the_server_share_one_decoder(tiny_llama):
    """The same prompt, seed and settings give the same tokens through GRPO's rollouts and through the server's
    scheduler (both on `decode/`): greedy, sampled, and sampled with top-p, in batches of 3."""
    import threading
    import time

    from tt_engine_adapter.serve.batching import Job
    from tt_engine_adapter.serve.generation import ChatModel
    from tt_engine_adapter.serve.request import ChatParams
    from tt_engine_adapter.testing.recording import Recording

    served = ChatModel(str(tiny_llama), device="cpu")
    for temperature, top_p in ((0.0, 1.0), (1.0, 1.0), (0.8, 0.9)):
        scheduler, jobs = Recording(served, max_batch=3, max_batch_tokens=3 * served.context_length), []
        for seed, text in enumerate(TEXTS, start=40):
            params = ChatParams(messages=[{"role": "user", "content": text}], temperature=temperature, top_p=top_p,
                                max_tokens=10, stop=["\u2603"], seed=seed)
            prompt, max_new = served.plan(params, params.messages)
            jobs.append(Job(params, prompt, max_new, lambda item: None, threading.Event(), time.monotonic() + 600))
            scheduler.submit(jobs[-1])
        while scheduler.running or scheduler._pending:
            scheduler._iteration()
        generator = Generator(served.model, sorted(served.stop_ids), 0, "cpu", 3)
        answers = generator.sample([Sample(job.prompt, job.params.seed) for job in jobs], 10, temperature, top_p)
        assert answers == [scheduler.tokens[id(job)] for job in jobs], (temperature, top_p)
