"""The prompt prefix a batch's rows share, prefilled once (engine environment; torch and transformers lazily).

`common(prompts)` is how many leading ids every prompt of a generation batch shares (the compiled system
prompt and chat template; a GRPO group's one prompt), capped so every row keeps at least its last id to run:
0 when under `MIN_PREFIX` or a single row. `PrefixCache.build` runs that prefix once (one row, no padding) and
repeats its keys and values to the batch's rows; `PrefixCache.inputs` lays each row out as the shared prefix,
then the row's padding, then the rest of its prompt, with an attention mask that is 0 on that padding, so a
generator that takes positions from the mask (`cumsum - 1`, transformers' `generate`) gives every token the
position it has alone. `usable(model)` says whether a model's cache can be shared so (full attention on every
layer and a cache keyword: the checks of `runtime/prefix.Sharing.decide`, whose reason the caller logs once).

Greedy tokens equal the unshared path's on the real base: tests/test_shared_prefix_generate.py.
"""

from __future__ import annotations

import inspect
from typing import Any, Optional, Sequence

from tt_engine_adapter.decode.kvcache import windowed

MIN_PREFIX = 4  # shorter shared starts are not worth a second forward


def common(prompts: Sequence[Sequence[int]]) -> int:
    """Leading ids every prompt shares, at most the shortest prompt's length less one; 0 when under
    `MIN_PREFIX` or fewer than two prompts."""
    if len(prompts) < 2:
        return 0
    first, cap = prompts[0], min(len(p) for p in prompts) - 1
    length = 0
    while length < cap and all(p[length] == first[length] for p in prompts):
        length += 1
    return length if length >= MIN_PREFIX else 0


def note(model: Any) -> str:
    """The line a stage logs once: whether generation shares its batches' prompt prefix, and why not."""
    off = usable(model)
    if off:
        return f"shared prompt prefix off for generation: {off}; every row runs its whole prompt"
    return "shared prompt prefix on for generation: a batch's common start (system prompt) is prefilled once"


def cache_keyword(model: Any) -> Optional[str]:
    """The keyword `model`'s forward takes its key/value cache by (`cache`, or `past_key_values` in older
    transformers), or None."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    accepted = inspect.signature(base.forward).parameters
    return "cache" if "cache" in accepted else "past_key_values" if "past_key_values" in accepted else None


def usable(model: Any) -> Optional[str]:
    """Why `model`'s prefix cache cannot be shared across rows, or None when it can."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if cache_keyword(model) is None:
        return f"{type(base).__name__} takes no key/value cache"
    config = getattr(base, "config", None)
    kinds = set(getattr(config, "layer_types", None) or [])
    if config is None or windowed(config) or kinds - {"full_attention"}:
        return f"{getattr(config, 'model_type', type(base).__name__)} has sliding-window or non-attention layers"
    return None


class PrefixCache:
    """The first `length` ids of a batch's prompts, run once, their keys and values repeated per row."""

    def __init__(self, cache: Any, length: int, rows: int, kwarg: str):
        self.cache, self.length, self.rows = cache, length, rows
        self.kwarg = kwarg  # the model's cache keyword: `cache`, or `past_key_values` in older transformers

    @staticmethod
    def build(model: Any, prefix: Sequence[int], rows: int, device: Any) -> "PrefixCache":
        import torch
        from transformers import DynamicCache

        kwarg = cache_keyword(model) or "past_key_values"
        cache = DynamicCache()
        ids = torch.tensor([list(prefix)], dtype=torch.long, device=device)
        model(input_ids=ids, use_cache=True, logits_to_keep=1, **{kwarg: cache})
        cache.batch_repeat_interleave(rows)
        return PrefixCache(cache, len(prefix), rows, kwarg)

    def inputs(self, prompts: Sequence[Sequence[int]], pad_id: int) -> tuple[Any, Any]:
        """(ids, attention mask) `[rows, width]`: each row's prefix, its padding, the rest of its prompt."""
        import torch

        width = self.length + max(len(p) - self.length for p in prompts)
        ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, seq in enumerate(prompts):
            rest = len(seq) - self.length
            ids[row, :self.length] = torch.tensor(seq[:self.length], dtype=torch.long)
            ids[row, width - rest:] = torch.tensor(seq[self.length:], dtype=torch.long)
            mask[row, :self.length] = 1
            mask[row, width - rest:] = 1
        return ids, mask
