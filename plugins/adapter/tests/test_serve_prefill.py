"""Batched prefill and incremental detokenization in the serving scheduler.

In-process, the scheduler driven one iteration at a time (no thread, no
timing): requests admitted together are prefilled in one forward pass (the
`/metrics` counter) and decoded in as many steps as the longest needs, and
every one gets exactly the items it gets alone. The incremental text tracker
gives exactly the deltas of decoding the whole answer on every token, on
multi-byte text, for a byte-level BPE and a SentencePiece-style tokenizer.
"""

from __future__ import annotations

import threading
import time

import pytest

from tt_engine_adapter.decode.groups import prefill_groups
from tt_engine_adapter.serve.batching import DONE, Job, Scheduler, Started
from tt_engine_adapter.serve.detokenize import TextTracker
from tt_engine_adapter.serve.generation import ChatModel, Delta, Finish
from tt_engine_adapter.serve.request import ApiError, ChatParams

NEVER = ["\u2603"]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from tt_engine_adapter.testing.tiny_model import build

    return ChatModel(str(build(tmp_path_factory.mktemp("prefill-model") / "tiny", arch="llama", hidden=64,
                               layers=2)), device="cpu")


def _job(model: ChatModel, text: str, max_tokens: int) -> tuple[Job, list]:
    params = ChatParams(messages=[{"role": "user", "content": text}], temperature=0, max_tokens=max_tokens,
                        stop=NEVER)
    prompt, max_new = model.plan(params, params.messages)
    items: list = []
    return Job(params, prompt, max_new, items.append, threading.Event(), time.monotonic() + 600), items


def _shown(items: list) -> list:
    """A job's items, comparable across runs."""
    out = []
    for item in items:
        if isinstance(item, Started):
            out.append("started")
        elif isinstance(item, Delta):
            out.append(("delta", item.text))
        elif isinstance(item, Finish):
            out.append(("finish", item.reason, item.prompt_tokens, item.completion_tokens))
        elif isinstance(item, ApiError):
            out.append(("error", item.status, item.message))
        else:
            out.append("done" if item is DONE else repr(item))
    return out


def _drain(scheduler: Scheduler) -> None:
    scheduler._iteration()
    while scheduler.running:
        scheduler._iteration()


def test_requests_admitted_together_are_prefilled_in_one_forward_and_answer_as_alone(model):
    texts = [f"review {i}: " + "the film was great " * (i % 3) for i in range(6)]
    budgets = [12, 1, 9, 16, 5, 12]  # the second ends at its first token, in the prefill
    alone = []
    for text, budget in zip(texts, budgets):
        job, items = _job(model, text, budget)
        scheduler = Scheduler(model, max_batch=1, max_batch_tokens=model.context_length)
        scheduler.submit(job)
        _drain(scheduler)
        alone.append(_shown(items))

    jobs = [_job(model, text, budget) for text, budget in zip(texts, budgets)]
    assert len({len(job.prompt) for job, _ in jobs}) > 1  # the prompts need padding
    assert len(prefill_groups([job for job, _ in jobs])) == 1
    scheduler = Scheduler(model, max_batch=len(jobs), max_batch_tokens=len(jobs) * model.context_length)
    before = model.metrics.snapshot()
    for job, _ in jobs:
        scheduler.submit(job)
    scheduler._iteration()
    assert scheduler.running == len(jobs) - 1  # the one-token answer never joined the batch
    _drain(scheduler)
    after = model.metrics.snapshot()

    assert [_shown(items) for _, items in jobs] == alone
    tokens = [shown[-2][3] for shown in alone]
    assert tokens[1] == 1 and max(tokens) > 1
    assert after["tt_serve_prefills_total"] - before["tt_serve_prefills_total"] == 1
    assert after["tt_serve_decode_steps_total"] - before["tt_serve_decode_steps_total"] == max(tokens) - 1
    assert after["tt_serve_generated_tokens_total"] - before["tt_serve_generated_tokens_total"] == sum(tokens)
    assert after["tt_serve_batch_rows_max"] >= len(jobs) - 1


def test_prompts_of_very_different_lengths_are_prefilled_apart():
    """A pass never holds more padding than real tokens: short prompts go together, a long one alone."""

    def job(length: int) -> Job:
        return Job(ChatParams(messages=[]), [7] * length, 4, lambda item: None, threading.Event(), 0)

    groups = prefill_groups([job(20), job(400), job(22), job(18), job(21)])
    assert [[len(j.prompt) for j in group] for group in groups] == [[18, 20, 21, 22], [400]]
    assert [len(g) for g in prefill_groups([job(10), job(10), job(40)])] == [3]  # 3 x 40 = 2 x 60 tokens
    assert [len(g) for g in prefill_groups([job(10), job(10), job(41)])] == [2, 1]


def test_ready_made_masks_only_where_every_layer_attends_in_full(model):
    """A sliding-window model builds its own per-layer masks from the 2D padding mask."""
    from transformers import Gemma2Config, LlamaConfig, MistralConfig, Qwen3Config

    from tt_engine_adapter.decode.forward import Forward
    from tt_engine_adapter.decode.kvcache import windowed

    assert not windowed(LlamaConfig()) and not windowed(Qwen3Config())
    assert windowed(MistralConfig(sliding_window=4096)) and windowed(Gemma2Config())
    assert Forward(model.torch, model.model, model.device).masks.prepared


def _full_decode_deltas(tokenizer, ids: list[int], stops: list[str]) -> list[str]:
    """The reference: decode the whole answer after every token (what the tracker did before)."""
    sent, out = "", []

    def send(certain: str) -> None:
        nonlocal sent
        if len(certain) > len(sent) and certain.startswith(sent):
            out.append(certain[len(sent):])
            sent = certain

    for n in range(1, len(ids) + 1):
        text = tokenizer.decode(ids[:n], skip_special_tokens=True, clean_up_tokenization_spaces=False).lstrip()
        cut = min((i for i in (text.find(s) for s in stops) if i >= 0), default=-1)
        if cut >= 0:
            send(text[:cut].rstrip())
            return out
        if text.endswith("\ufffd"):
            continue
        safe = len(text.rstrip())
        for stop in stops:
            for k in range(min(len(stop) - 1, len(text)), 0, -1):
                if text.endswith(stop[:k]):
                    safe = min(safe, len(text) - k)
                    break
        send(text[:safe].rstrip())
    send(tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False).strip())
    return out


def _tracked(tokenizer, ids: list[int], stops: list[str]) -> list[str]:
    tracker, out = TextTracker(tokenizer, stops), []
    for token in ids:
        delta = tracker.add(token)
        if delta:
            out.append(delta)
        if tracker.stopped:
            return out
    rest = tracker.finish()
    return out + [rest] if rest else out


TEXTS = ["  Café crème, naïve façade: très bien!  ", "日本語のレビュー: 映画は素晴らしい 🎬👍🏽 ok",
         "e\u0301 (combining) — “quotes” … 💡💡 end", "line one\n\nline two ü ß Ωmega"]


def _sentencepiece_style():
    """A Llama-2-style tokenizer: Metaspace pre-tokenizer and decoder (a word's first piece carries ▁)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    tok.train_from_iterator(TEXTS * 3, trainers.BpeTrainer(vocab_size=120, special_tokens=["<unk>", "<eot>"]))
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<eot>")


@pytest.mark.parametrize("kind", ["byte-level", "sentencepiece-style"])
def test_incremental_detokenization_gives_the_full_decode_deltas_on_multibyte_text(model, kind):
    tokenizer = model.tokenizer if kind == "byte-level" else _sentencepiece_style()
    special = tokenizer.convert_tokens_to_ids(tokenizer.eos_token)
    for text in TEXTS:
        ids = tokenizer.encode(text, add_special_tokens=False)
        with_special = ids[:3] + [special] + ids[3:]
        for stops in ([], ["💡", "ok"], ["bien", "\n\n"], ["ü ß"], ["映画は", "👍"], ["\u0301", "…"]):
            for case in (ids, with_special):
                expected = _full_decode_deltas(tokenizer, case, stops)
                assert _tracked(tokenizer, case, stops) == expected, (kind, text, stops)
        whole = tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False).strip()
        assert "".join(_tracked(tokenizer, ids, [])) == whole
    if kind == "byte-level":  # the byte-level BPE splits these characters into several tokens
        assert any("\ufffd" in tokenizer.decode(ids[:n]) for text in TEXTS
                   for ids in [tokenizer.encode(text, add_special_tokens=False)] for n in range(1, len(ids)))
