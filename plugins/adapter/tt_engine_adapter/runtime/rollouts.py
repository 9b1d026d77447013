"""GRPO's rollouts on the engine's decoder (`decode/`, the server's too), in-process: continuous batching over a
KV cache. Engine environment; imports `decode/`, never `serve/`.

The padded inputs, masks, forward passes and per-layer cache of a batch of rows are the decoder's
(`decode.forward.Forward`, `decode.kvcache.BatchCache`), the admission of prompts into one prefill pass is its
`prefill_groups`, and each row's next token comes from its `picker.pick` (temperature and top-p, one seeded
`torch.Generator` per sample, so a sample's tokens do not depend on which rows it was batched with). What is
added for training:

- the samples of one prompt (a GRPO group) share one prefill: the prompt is run once and its cache copied to
  the group's rows;
- continuous batching without a thread: up to `max_batch` rows decode together, a row that ends (a stop id
  or its budget) leaves at once and a waiting sample takes its place;
- the answer tokens come back as ids (with the stop token that ended them, as TRL's completions do).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Sequence

from tt_engine_adapter.decode import picker
from tt_engine_adapter.decode.forward import Forward
from tt_engine_adapter.decode.groups import prefill_groups
from tt_engine_adapter.decode.kvcache import BatchCache


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


@dataclass
class _Waiting:
    prompt: list[int]
    index: int


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

        self.torch, self.model, self.device, self.max_batch = torch, model, device, max_batch
        self.stop_ids, self.pad_id = set(stop_ids), pad_id
        self._forward = Forward(torch, model, device)
        self.stats = Stats()

    def sample(self, samples: Sequence[Sample], max_new: int, temperature: float, top_p: float = 1.0
               ) -> list[list[int]]:
        """Each sample's answer ids (at most `max_new`, ending with its stop id when it stopped), in order."""
        torch = self.torch
        params = picker.Sampling(temperature, top_p)
        waiting = deque(range(len(samples)))
        answers: list[list[int]] = [[] for _ in samples]
        rows: list[_Row] = []
        batch = BatchCache()
        with torch.inference_mode():
            while waiting or rows:
                admitted = []
                while waiting and len(rows) + len(admitted) < self.max_batch:
                    admitted.append(waiting.popleft())
                jobs = [_Waiting(samples[i].prompt, i) for i in admitted]
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

    def _prefill(self, samples: list[Sample], indices: list[int], max_new: int, params: Any,
                 batch: BatchCache) -> list[_Row]:
        """One forward over the distinct prompts of `samples`; every sample's first token. The rows that go on
        join `batch` (in the order returned); the others are returned done."""
        torch = self.torch
        distinct: dict[tuple[int, ...], int] = {}
        for sample in samples:
            distinct.setdefault(tuple(sample.prompt), len(distinct))
        last, cache, pads = self._forward.prefill([list(p) for p in distinct], self.pad_id)
        self.stats.prefills += 1
        which = [distinct[tuple(s.prompt)] for s in samples]
        logits = last.index_select(0, torch.tensor(which, device=last.device))
        rows = [_Row(i, picker.seeded(torch, s.seed)) for i, s in zip(indices, samples)]
        self._take(rows, logits, max_new, params)
        going = [k for k, row in enumerate(rows) if not row.done]
        if going:
            batch.join(torch, cache, [which[k] for k in going], pads)
        return [rows[k] for k in going] + [row for row in rows if row.done]

    def _decode(self, rows: list[_Row], batch: BatchCache, max_new: int, params: Any) -> None:
        logits = self._forward.step([row.tokens[-1] for row in rows], batch)
        self.stats.decode_steps += 1
        self.stats.max_rows = max(self.stats.max_rows, len(rows))
        self._take(rows, logits, max_new, params)

    def _take(self, rows: list[_Row], logits: Any, max_new: int, params: Any) -> None:
        tokens = picker.pick(self.torch, logits, [params] * len(rows), [row.generator for row in rows])
        self.stats.tokens += len(rows)
        for row, token in zip(rows, tokens):
            row.tokens.append(token)
            if token in self.stop_ids or len(row.tokens) >= max_new:
                row.done = True
