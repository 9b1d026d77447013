"""A causal LM's batched forward passes over a `BatchCache` (engine environment; transformers imported lazily).

`prefill` runs left-padded prompts in one pass into a fresh transformers
cache; `prefill_after` runs the rest of prompts whose start is a kept prefix
(`prefixstore.Entry`) over those prefixes' keys and values, each token at its
place in the whole prompt, and returns the rows laid out as `BatchCache` holds
them (padding, prefix, rest); `step` runs one new token per row of the running batch over its cache
and stores the grown cache back in the batch. Both return each row's logits at
its last position, in float32. The model may be PEFT-wrapped; its cache
keyword (`cache` or `past_key_values`) and whether it can keep the last
position's logits only (`logits_to_keep`) are read from its base's `forward`.
The caller holds the context of a pass (`torch.inference_mode()`, a server's
per-row adapters) and decides which rows go on (`BatchCache.join`, `keep`).
"""

from __future__ import annotations

import inspect
from typing import Any, Optional

from tt_engine_adapter.decode.kvcache import BatchCache, Masks, layers, left_aligned
from tt_engine_adapter.decode.prefixstore import Entry


class Forward:
    """`model`'s prefill and decode passes on `device`."""

    def __init__(self, torch: Any, model: Any, device: Any):
        from transformers import DynamicCache

        self.torch, self.model = torch, model
        self._cache_class = DynamicCache
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        accepted = inspect.signature(base.forward).parameters
        self._cache_kwarg = "cache" if "cache" in accepted else "past_key_values"
        self._last_logits = {"logits_to_keep": 1} if "logits_to_keep" in accepted else {}
        self.masks = Masks(torch, device, base.dtype, base.config)

    def prefill(self, prompts: list[list[int]], pad_id: int) -> tuple[Any, Any, list[int]]:
        """(last logits `[rows, vocab]`, the pass's transformers cache, each row's left padding)."""
        inputs, pads = self.masks.prefill(prompts, pad_id)
        cache = self._cache_class()
        out = self.model(**inputs.kwargs(), use_cache=True, **self._last_logits, **{self._cache_kwarg: cache})
        return out.logits[:, -1].float(), cache, pads

    def prefill_after(self, prefixes: list[Optional[Entry]], rests: list[list[int]],
                      pad_id: int) -> tuple[Any, list[Any], list[Any], list[int]]:
        """Row `i` is `prefixes[i]` (None: no prefix) then `rests[i]` (at least one id): (last logits, per-layer
        keys, per-layer values, each row's left padding), for `BatchCache.join_layers`."""
        torch = self.torch
        cached = [entry.length if entry is not None else 0 for entry in prefixes]
        inputs = self.masks.after(cached, rests, pad_id)
        cache = self._cache_class(ddp_cache_data=_prior(torch, prefixes, max(cached))) if any(cached) \
            else self._cache_class()
        out = self.model(**inputs.kwargs(), use_cache=True, **self._last_logits, **{self._cache_kwarg: cache})
        keys, values = layers(cache)
        lengths = [len(rest) for rest in rests]
        keys, pads = left_aligned(torch, keys, cached, lengths)
        values, _ = left_aligned(torch, values, cached, lengths)
        return out.logits[:, -1].float(), keys, values, pads

    def step(self, tokens: list[int], batch: BatchCache) -> Any:
        """One token per row of `batch` (in its order); `batch` holds the grown cache after. Last logits."""
        inputs = self.masks.decode(tokens, batch.pads, batch.length)
        cache = self._cache_class(ddp_cache_data=list(zip(batch.keys, batch.values)))
        out = self.model(**inputs.kwargs(), use_cache=True, **self._last_logits, **{self._cache_kwarg: cache})
        batch.keys, batch.values = layers(cache)
        return out.logits[:, -1].float()


def _prior(torch: Any, prefixes: list[Optional[Entry]], prior: int) -> list[tuple[Any, Any]]:
    """Per-layer (keys, values) `[rows, heads, prior, dim]`: row `i` its prefix's, zeros after it (masked)."""
    if all(entry is prefixes[0] for entry in prefixes):  # one prefix for every row: a view, no copy
        rows = len(prefixes)
        return [(k.expand(rows, -1, -1, -1), v.expand(rows, -1, -1, -1))
                for k, v in zip(prefixes[0].keys, prefixes[0].values)]
    some = next(entry for entry in prefixes if entry is not None)
    out = []
    for layer in range(len(some.keys)):
        pair = []
        for which in ("keys", "values"):
            like = getattr(some, which)[layer]
            blank = like.new_zeros((1, like.shape[1], prior, like.shape[3]))
            rows = []
            for entry in prefixes:
                if entry is None:
                    rows.append(blank)
                    continue
                mine = getattr(entry, which)[layer]
                rows.append(mine if entry.length == prior else torch.cat([mine, blank[:, :, entry.length:]], dim=2))
            pair.append(torch.cat(rows))
        out.append((pair[0], pair[1]))
    return out
