"""A causal LM's batched forward passes over a `BatchCache` (engine environment; transformers imported lazily).

`prefill` runs left-padded prompts in one pass into a fresh transformers
cache; `step` runs one new token per row of the running batch over its cache
and stores the grown cache back in the batch. Both return each row's logits at
its last position, in float32. The model may be PEFT-wrapped; its cache
keyword (`cache` or `past_key_values`) and whether it can keep the last
position's logits only (`logits_to_keep`) are read from its base's `forward`.
The caller holds the context of a pass (`torch.inference_mode()`, a server's
per-row adapters) and decides which rows go on (`BatchCache.join`, `keep`).
"""

from __future__ import annotations

import inspect
from typing import Any

from tt_engine_adapter.decode.kvcache import BatchCache, Masks, layers


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

    def step(self, tokens: list[int], batch: BatchCache) -> Any:
        """One token per row of `batch` (in its order); `batch` holds the grown cache after. Last logits."""
        inputs = self.masks.decode(tokens, batch.pads, batch.length)
        cache = self._cache_class(ddp_cache_data=list(zip(batch.keys, batch.values)))
        out = self.model(**inputs.kwargs(), use_cache=True, **self._last_logits, **{self._cache_kwarg: cache})
        batch.keys, batch.values = layers(cache)
        return out.logits[:, -1].float()
