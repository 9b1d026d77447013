"""GRPO's rollouts on the serving engine's batched generator, in-process: continuous batching over a KV cache.

The padded inputs, masks and per-layer cache of a batch of rows are the server's (`serve.kvcache`: `Masks`,
`BatchCache`), the admission of prompts into one prefill pass is its `prefill_groups`, and each row's next
token comes from its `ChatModel.pick` (temperature and top-p, one seeded `torch.Generator` per sample, so a
sample's tokens do not depend on which rows it was batched with). What is added for training:

- the samples of one prompt (a GRPO group) share one prefill: the prompt is run once and its cache copied to
  the group's rows;
- continuous batching without a thread: up to `max_batch` rows decode together, a row that ends (a stop id
  or its budget) leaves at once and a waiting sample takes its place;
- the answer tokens come back as ids (with the stop token that ended them, as TRL's completions do).
"""

from __future__ import annotations

import inspect
from collections import deque
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Sequence

from tt_engine_adapter.serve.batching import prefill_groups
from tt_engine_adapter.serve.generation import ChatModel
from tt_engine_adapter.serve.kvcache import BatchCache, Masks, layers


@dataclass
class Sample:
    """One answer to draw: the prompt's ids and the seed of its sampler."""

    prompt: list[int]
    seed: int


@dataclass
class _Row:
    index: int
    generator: Any
    tokens: list[int] = field(default_factory=list)
    done: bool = False


class _Picker:
    """The serving engine's token picker (`ChatModel.pick` and its sampler) without a loaded ChatModel."""

    pick = ChatModel.pick
    _sample = ChatModel._sample

    def __init__(self, torch: Any):
        self.torch = torch


@dataclass
class Stats:
    prefills: int = 0
    decode_steps: int = 0
    tokens: int = 0
    max_rows: int = 0


class Generator:
    """Samples answers from `model` (a causal LM, PEFT-wrapped or not) with its KV cache, batched."""

    def __init__(self, model: Any, stop_ids: Sequence[int], pad_id: int, device: str, max_batch: int):
        import torch
        from transformers import DynamicCache

        self.torch, self.model, self.device, self.max_batch = torch, model, device, max_batch
        self.stop_ids, self.pad_id = set(stop_ids), pad_id
        self._cache_class = DynamicCache
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        accepted = inspect.signature(base.forward).parameters
        self._cache_kwarg = "cache" if "cache" in accepted else "past_key_values"
        self._last_logits = {"logits_to_keep": 1} if "logits_to_keep" in accepted else {}
        self._masks = Masks(torch, device, base.dtype, base.config)
        self._picker = _Picker(torch)
        self.stats = Stats()

    def sample(self, samples: Sequence[Sample], max_new: int, temperature: float, top_p: float = 1.0
               ) -> list[list[int]]:
        """Each sample's answer ids (at most `max_new`, ending with its stop id when it stopped), in order."""
        torch = self.torch
        params = SimpleNamespace(temperature=temperature, top_p=top_p)
        waiting = deque(range(len(samples)))
        answers: list[list[int]] = [[] for _ in samples]
        rows: list[_Row] = []
        batch = BatchCache()
        with torch.inference_mode():
            while waiting or rows:
                admitted = []
                while waiting and len(rows) + len(admitted) < self.max_batch:
                    admitted.append(waiting.popleft())
                jobs = [SimpleNamespace(prompt=samples[i].prompt, index=i) for i in admitted]
                for group in prefill_groups(jobs):
                    for row in self._prefill([samples[j.index] for j in group], [j.index for j in group],
                                             max_new, params, batch):
                        if row.done:  # ended at its first token: it never joined the cache
                            answers[row.index] = row.tokens
                        else:
                            rows.append(row)
                if rows:
                    self._decode(rows, batch, max_new, params)
                keep = [i for i, row in enumerate(rows) if not row.done]
                for row in rows:
                    if row.done:
                        answers[row.index] = row.tokens
                if len(keep) < len(rows):
                    batch.keep(torch, keep)
                    rows = [rows[i] for i in keep]
        return answers

    def _generator(self, seed: int) -> Any:
        generator = self.torch.Generator(device="cpu")
        generator.manual_seed(seed)
        return generator

    def _forward(self, inputs: Any, cache: Any) -> Any:
        return self.model(**inputs.kwargs(), use_cache=True, **self._last_logits, **{self._cache_kwarg: cache})

    def _prefill(self, samples: list[Sample], indices: list[int], max_new: int, params: Any,
                 batch: BatchCache) -> list[_Row]:
        """One forward over the distinct prompts of `samples`; every sample's first token. The rows that go on
        join `batch` (in the order returned); the others are returned done."""
        torch = self.torch
        distinct: dict[tuple[int, ...], int] = {}
        for sample in samples:
            distinct.setdefault(tuple(sample.prompt), len(distinct))
        inputs, pads = self._masks.prefill([list(p) for p in distinct], self.pad_id)
        cache = self._cache_class()
        out = self._forward(inputs, cache)
        self.stats.prefills += 1
        which = [distinct[tuple(s.prompt)] for s in samples]
        index = torch.tensor(which, device=out.logits.device)
        logits = out.logits[:, -1].float().index_select(0, index)
        rows = [_Row(i, self._generator(s.seed)) for i, s in zip(indices, samples)]
        self._take(rows, logits, max_new, params)
        going = [k for k, row in enumerate(rows) if not row.done]
        if going:
            keys, values = layers(cache)
            pick = torch.tensor([which[k] for k in going], device=keys[0].device)
            keys, values = [t.index_select(0, pick) for t in keys], [t.index_select(0, pick) for t in values]
            batch.add(torch, keys, values, [pads[which[k]] for k in going])
        return [rows[k] for k in going] + [row for row in rows if row.done]

    def _decode(self, rows: list[_Row], batch: BatchCache, max_new: int, params: Any) -> None:
        inputs = self._masks.decode([row.tokens[-1] for row in rows], batch.pads, batch.length)
        cache = self._cache_class(ddp_cache_data=list(zip(batch.keys, batch.values)))
        out = self._forward(inputs, cache)
        self.stats.decode_steps += 1
        self.stats.max_rows = max(self.stats.max_rows, len(rows))
        batch.keys, batch.values = layers(cache)
        self._take(rows, out.logits[:, -1].float(), max_new, params)

    def _take(self, rows: list[_Row], logits: Any, max_new: int, params: Any) -> None:
        tokens = self._picker.pick(logits, [params] * len(rows), [row.generator for row in rows])
        self.stats.tokens += len(rows)
        for row, token in zip(rows, tokens):
            row.tokens.append(token)
            if token in self.stop_ids or len(row.tokens) >= max_new:
                row.done = True
