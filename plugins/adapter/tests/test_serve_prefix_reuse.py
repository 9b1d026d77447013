"""The server's prompt starts kept across requests (serve/reuse.py, decode/prefixstore.py; docs/serving.md "Prompt
prefix reuse") on the real base (SmolLM2-135M-Instruct, float32, CPU), the scheduler driven in-process.

Greedy tokens with the prefix cache equal those without it, request for request: on the base alone over rounds of
requests sharing a system prompt (the first builds the kept start, the rest prefill only their own ids; rests of
different lengths and a request with another system prompt in one pass), and on a multi-adapter server whose two
adapters (trained for a few steps on the real base, so their answers differ) get the same system prompt: each
adapter keeps its own entry and one adapter's entry never answers for the other. A bound that holds one start
evicts the least recently used, and answers stay equal; a model whose attention cannot take a cached prefix (a
sliding window) serves without it and says why.
"""

from __future__ import annotations

import hashlib
import threading
import time

import pytest

from tt_engine_adapter.serve.adapters import Catalog, Residency
from tt_engine_adapter.serve.batching import Job
from tt_engine_adapter.serve.generation import ChatModel
from tt_engine_adapter.serve.request import ChatParams, apply_system_message
from tt_engine_adapter.testing.recording import Recording
from tt_stagekit.contract import ServedModel

SYSTEM = "Rate the movie review: thumbs up or thumbs down. Answer with the two words only, then say why."
OTHER = "You are a terse film critic. Reply in one short sentence."
ROUNDS = [["a warm, funny and moving film", "the plot was dull and slow " * 3, "great acting"],
          ["I walked out after twenty minutes, bored", "meh"]]
MiB = 1 << 20


@pytest.fixture(scope="module")
def model(real_base):
    return ChatModel(str(real_base), device="cpu")


@pytest.fixture(scope="module")
def adapters(real_base, tmp_path_factory):
    """Two LoRA adapters trained a few steps on the real base (different seeds and answers), as tt registers."""
    from tt_engine_adapter.testing.tiny_adapters import build

    folders = build(real_base, tmp_path_factory.mktemp("prefix-adapters"), count=2, steps=6)
    return [ServedModel(name=f"tuned-{k}", path=str(folder), version=1, system_message=SYSTEM,
                        manifest_sha256=hashlib.sha256((folder / "artifact-manifest.json").read_bytes()).hexdigest())
            for k, folder in enumerate(folders)]


def _job(model: ChatModel, text: str, system: str | None, adapter=None) -> Job:
    params = ChatParams(messages=[{"role": "user", "content": text}], temperature=0, max_tokens=5, stop=["\u2603"])
    messages = apply_system_message(params.messages, system)
    prompt, max_new = model.plan(params, messages)
    return Job(params, prompt, max_new, lambda item: None, threading.Event(), time.monotonic() + 600,
               adapter=adapter, shared=model.shared_start(messages, prompt))


def _serve(scheduler: Recording, rounds: list[list[Job]]) -> list[list[int]]:
    """Each round admitted together (one prefill pass) and decoded to the end; every job's tokens, in order."""
    for jobs in rounds:
        for job in jobs:
            scheduler.submit(job)
        scheduler._iteration()
        while scheduler.running:
            scheduler._iteration()
    return [scheduler.tokens[id(job)] for jobs in rounds for job in jobs]


def _counts(model: ChatModel, before: dict) -> dict:
    after = model.metrics.snapshot()
    return {k.removeprefix("tt_serve_prefix_"): after[k] - before[k] for k in after if "prefix_" in k}


def test_the_kept_start_is_the_system_prompt_and_template_start(model):
    job = _job(model, "great acting", SYSTEM)
    start = model.tokenizer.decode(job.prompt[:job.shared])
    assert SYSTEM in start and start.endswith("<|im_start|>user\n"), start
    assert _job(model, "meh", SYSTEM).prompt[:job.shared] == job.prompt[:job.shared]
    assert _job(model, "meh", None).shared > 4  # the template's own default system prompt is a start too


def test_greedy_tokens_with_kept_starts_equal_those_without_over_rounds_of_requests(model):
    def rounds() -> list[list[Job]]:
        made = [[_job(model, text, SYSTEM) for text in texts] for texts in ROUNDS]
        made[1].append(_job(model, "the film was great", OTHER))  # another start, in a pass with kept ones
        return made

    plain = _serve(Recording(model, max_batch=8, max_batch_tokens=8 * model.context_length), rounds())
    before = model.metrics.snapshot()
    scheduler = Recording(model, max_batch=8, max_batch_tokens=8 * model.context_length, prefix_cache_bytes=64 * MiB)
    assert scheduler.reuse.on, scheduler.reuse.note
    reused = _serve(scheduler, rounds())
    counts = _counts(model, before)
    assert reused == plain
    assert len({tuple(t) for t in plain}) > 2  # the answers differ: each row's own ids were read
    assert counts["misses_total"] == 2 and counts["hits_total"] == sum(map(len, ROUNDS)) - 1
    assert len(scheduler.reuse.store) == 2 and 0 < scheduler.reuse.store.bytes <= 64 * MiB


def test_each_adapter_keeps_its_own_start_and_never_answers_from_anothers(model, real_base, adapters):
    def server(limit: int) -> tuple[Recording, Catalog]:
        served = ChatModel(str(real_base), device="cpu")
        catalog = Catalog(adapters)
        residency = Residency(served, None, catalog)
        residency.ensure(catalog.entries(), set())
        return Recording(served, max_batch=8, max_batch_tokens=8 * served.context_length, residency=residency,
                         prefix_cache_bytes=limit), catalog

    def rounds(catalog: Catalog, model: ChatModel) -> list[list[Job]]:
        first, second = (catalog.find(f"tuned-{k}") for k in range(2))
        return [[_job(model, ROUNDS[0][0], SYSTEM, first)],  # the first adapter's start is kept ...
                [_job(model, ROUNDS[0][0], SYSTEM, second)],  # ... and must not answer the second's first request
                [_job(model, text, SYSTEM, entry) for text in ROUNDS[1] for entry in (first, second)]]  # mixed pass

    plain_server, plain_catalog = server(0)
    assert not plain_server.reuse.on
    plain = _serve(plain_server, rounds(plain_catalog, plain_server.model))
    assert plain[0] != plain[1]  # the adapters answer differently: their keys and values differ
    assert all(plain[i] != plain[i + 1] for i in range(2, len(plain), 2))
    scheduler, catalog = server(64 * MiB)
    reused = _serve(scheduler, rounds(catalog, scheduler.model))
    assert reused == plain
    assert scheduler.reuse.store.owners() == {e.uid for e in catalog.entries()}
    assert scheduler.model.metrics.snapshot()["tt_serve_prefix_hits_total"] == len(ROUNDS[1]) * 2


def test_a_bound_of_one_start_evicts_the_least_recently_used_and_answers_stay_equal(model):
    def rounds() -> list[list[Job]]:
        return [[_job(model, text, system)] for text in ROUNDS[1][:1] for system in (SYSTEM, OTHER, SYSTEM)]

    plain = _serve(Recording(model, max_batch=4, max_batch_tokens=4 * model.context_length), rounds())
    probe = Recording(model, max_batch=4, max_batch_tokens=4 * model.context_length, prefix_cache_bytes=64 * MiB)
    _serve(probe, [[_job(model, "x", SYSTEM)]])
    one = probe.reuse.store.bytes  # the system prompt's start; the other is a little shorter
    scheduler = Recording(model, max_batch=4, max_batch_tokens=4 * model.context_length, prefix_cache_bytes=one)
    before = model.metrics.snapshot()
    assert _serve(scheduler, rounds()) == plain
    assert len(scheduler.reuse.store) == 1 and scheduler.reuse.store.bytes <= one
    assert scheduler.reuse.store.evictions == len(plain) - 1 and _counts(model, before)["hits_total"] == 0


def test_a_model_whose_attention_cannot_take_a_cached_prefix_serves_without_it_and_says_why(model):
    was = getattr(model.model.config, "sliding_window", None)
    model.model.config.sliding_window = 64
    try:
        scheduler = Recording(model, max_batch=4, max_batch_tokens=4 * model.context_length,
                              prefix_cache_bytes=64 * MiB)
    finally:
        model.model.config.sliding_window = was
    assert not scheduler.reuse.on and "sliding-window" in scheduler.reuse.note and "off" in scheduler.reuse.note
    before = model.metrics.snapshot()
    _serve(scheduler, [[_job(model, "meh", SYSTEM)]])
    assert _counts(model, before) == {"hits_total": 0, "misses_total": 0, "reused_tokens_total": 0,
                                      "cache_bytes": 0}
    off = Recording(model, max_batch=1, max_batch_tokens=model.context_length)
    assert "--prefix-cache-mb is 0" in off.reuse.note
