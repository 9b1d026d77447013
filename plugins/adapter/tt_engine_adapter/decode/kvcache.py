"""The running batch's key/value cache and the padded inputs of one batched forward pass (engine environment).

Rows of different lengths share one tensor per layer by left padding: row `i`
has `pads[i]` positions of padding before its tokens, which every forward
masks out; each row gets its own positions (`arange - pad`), so a row
computes what it would alone. A row that joins grows either itself or the
batch with padding; rows that leave are dropped, and padding every remaining
row has is dropped with them.

Masks are built here, not by the model: with an `sdpa` or `eager` attention
implementation a prepared additive 4D mask (`[rows, 1, queries, keys]`, 0 or
the dtype's minimum) goes in as it is, which saves the model deriving one
from a 2D padding mask on every step; other implementations, and models with
sliding-window layers (whose per-layer masks the model must build), get the
2D mask (1 for a token, 0 for padding). A padding query in a prefill attends to
itself only (never to nothing), so its outputs stay finite; they are masked
out of every real token's attention.

Rows whose prompt start is a kept prefix (`prefixstore`) run only their rest
(`Masks.after`: the prefix held first in the pass's prior cache, each rest
token at its place in the whole prompt); `left_aligned` then lays them out as
every other row (padding, prefix, rest) before they join the batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

PREPARED_MASKS = ("sdpa", "eager")  # attention implementations that take an additive 4D mask as it is


class BatchCache:
    """Per-layer key/value tensors `[rows, heads, length, dim]`, row `i` left-padded by `pads[i]` positions."""

    def __init__(self) -> None:
        self.keys: list[Any] = []
        self.values: list[Any] = []
        self.pads: list[int] = []

    @property
    def length(self) -> int:
        return int(self.keys[0].shape[2]) if self.keys else 0

    def add(self, torch: Any, keys: list[Any], values: list[Any], pads: list[int]) -> None:
        """Append rows (per-layer tensors of their own common length, left-padded by `pads`)."""
        new_len, length = int(keys[0].shape[2]), self.length
        if not self.pads:
            self.keys, self.values, self.pads = list(keys), list(values), list(pads)
            return
        if new_len < length:
            keys = [_left_pad(torch, t, length - new_len) for t in keys]
            values = [_left_pad(torch, t, length - new_len) for t in values]
            pads = [p + length - new_len for p in pads]
        elif new_len > length:
            self.keys = [_left_pad(torch, t, new_len - length) for t in self.keys]
            self.values = [_left_pad(torch, t, new_len - length) for t in self.values]
            self.pads = [p + new_len - length for p in self.pads]
        self.keys = [torch.cat([a, b]) for a, b in zip(self.keys, keys)]
        self.values = [torch.cat([a, b]) for a, b in zip(self.values, values)]
        self.pads += pads

    def join(self, torch: Any, cache: Any, rows: list[int], pads: list[int]) -> None:
        """Append rows `rows` (indices, in order; one may come twice) of a prefill pass's transformers `cache`,
        whose row `r` was left-padded by `pads[r]`."""
        keys, values = layers(cache)
        self.join_layers(torch, keys, values, rows, pads)

    def join_layers(self, torch: Any, keys: list[Any], values: list[Any], rows: list[int], pads: list[int]) -> None:
        """`join` from per-layer (keys, values) tensors of a pass instead of its transformers cache."""
        if rows != list(range(len(pads))):
            index = torch.tensor(rows, device=keys[0].device)
            keys, values = [t.index_select(0, index) for t in keys], [t.index_select(0, index) for t in values]
        self.add(torch, keys, values, [pads[r] for r in rows])

    def keep(self, torch: Any, rows: list[int]) -> None:
        """Keep only `rows` (indices, in order)."""
        if not rows:
            self.keys, self.values, self.pads = [], [], []
            return
        index = torch.tensor(rows, device=self.keys[0].device)
        trim = min(self.pads[r] for r in rows)  # padding every remaining row has is dropped
        self.keys = [t.index_select(0, index)[:, :, trim:] for t in self.keys]
        self.values = [t.index_select(0, index)[:, :, trim:] for t in self.values]
        self.pads = [self.pads[r] - trim for r in rows]


def _left_pad(torch: Any, tensor: Any, amount: int) -> Any:
    shape = list(tensor.shape)
    shape[2] = amount
    return torch.cat([tensor.new_zeros(shape), tensor], dim=2)


def left_aligned(torch: Any, tensors: list[Any], cached: list[int], lengths: list[int]) -> tuple[list[Any], list[int]]:
    """A pass after cached prefixes (`Masks.after`) laid out as the batch holds rows: per-layer tensors
    `[rows, heads, prior + width, dim]`, row `i` holding its prefix at `[0, cached[i])` and its rest at the last
    `lengths[i]` places, become `[rows, heads, longest, dim]` with row `i` its padding, its prefix, its rest
    (the padding masked by every later pass: any values). Returns (tensors, each row's padding)."""
    total = int(tensors[0].shape[2])
    prior, real = total - max(lengths), [c + n for c, n in zip(cached, lengths)]
    longest = max(real)
    pads = [longest - r for r in real]
    if all(c == prior for c in cached) and not any(pads):
        return tensors, pads  # already prefix then rest on every row
    order = [[0] * pad + list(range(c)) + list(range(total - n, total)) for c, n, pad in zip(cached, lengths, pads)]
    index = torch.tensor(order, device=tensors[0].device)[:, None, :, None]
    return [t.gather(2, index.expand(t.shape[0], t.shape[1], longest, t.shape[3])) for t in tensors], pads


def layers(cache: Any) -> tuple[list[Any], list[Any]]:
    """A transformers cache's per-layer (keys, values)."""
    keys, values = [], []
    for entry in cache:
        keys.append(entry[0])
        values.append(entry[1])
    return keys, values


def windowed(config: Any) -> bool:
    """Whether some layer of the model attends through a sliding window."""
    kinds = getattr(config, "layer_types", None)
    if kinds:
        return any(kind != "full_attention" for kind in kinds)
    return getattr(config, "sliding_window", None) is not None and getattr(config, "use_sliding_window", True)


@dataclass
class Inputs:
    """Keyword arguments of one forward pass (besides the cache)."""

    input_ids: Any
    position_ids: Optional[Any]
    attention_mask: Optional[Any]

    def kwargs(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if v is not None}


class Masks:
    """Builds padded inputs for a model on `device` whose attention implementation is `implementation`."""

    def __init__(self, torch: Any, device: Any, dtype: Any, config: Any):
        self.torch, self.device, self.dtype = torch, device, dtype
        self.prepared = getattr(config, "_attn_implementation", None) in PREPARED_MASKS and not windowed(config)

    def prefill(self, prompts: list[list[int]], pad_id: int) -> tuple[Inputs, list[int]]:
        """Left-padded prompts in one forward; (inputs, pads). Prompts of one length need no mask."""
        torch = self.torch
        longest = max(len(p) for p in prompts)
        pads = [longest - len(p) for p in prompts]
        ids = torch.tensor([[pad_id] * pad + p for pad, p in zip(pads, prompts)], dtype=torch.long,
                           device=self.device)
        if not any(pads):
            return Inputs(ids, None, None), pads
        pad = torch.tensor(pads, device=self.device)[:, None]
        steps = torch.arange(longest, device=self.device)
        positions = (steps[None, :] - pad).clamp(min=0)
        if not self.prepared:
            return Inputs(ids, positions, (steps[None, :] >= pad).long()), pads
        query, key = steps[:, None], steps[None, :]
        allowed = ((key <= query)[None] & (key[None] >= pad[:, :, None])) | (key == query)[None]
        return Inputs(ids, positions, self._additive(allowed[:, None])), pads

    def after(self, cached: list[int], rests: list[list[int]], pad_id: int) -> Inputs:
        """Prompt rests that follow cached prefixes: row `i`'s prefix is `cached[i]` positions (0: none), held
        first in a prior cache of `max(cached)` positions (masked from `cached[i]` on); its rest is left-padded
        to the longest rest. Each rest token gets its place in the whole prompt (`cached[i] + j`) and attends to
        the row's prefix and the rest before it, so it computes what it would alone. Prepared masks only."""
        torch = self.torch
        if not self.prepared:
            raise ValueError("a prefill after cached prefixes needs an sdpa or eager model without sliding windows")
        prior, width = max(cached), max(len(r) for r in rests)
        pads = [width - len(r) for r in rests]
        ids = torch.tensor([[pad_id] * pad + r for pad, r in zip(pads, rests)], dtype=torch.long, device=self.device)
        pad = torch.tensor(pads, device=self.device)[:, None, None]
        have = torch.tensor(cached, device=self.device)[:, None, None]
        steps = torch.arange(width, device=self.device)
        positions = (have[:, 0] + steps[None, :] - pad[:, 0]).clamp(min=0)
        query, key = steps[None, :, None], torch.arange(prior + width, device=self.device)[None, None, :]
        own = (key >= prior + pad) & (key <= prior + query)  # the row's rest up to the query (causal)
        allowed = (key < have) | own | (key == prior + query)  # a padding query attends to itself too
        return Inputs(ids, positions, self._additive(allowed[:, None]))

    def decode(self, tokens: list[int], pads: list[int], length: int) -> Inputs:
        """One new token per row after `length` cached positions; rows without padding need no mask."""
        torch = self.torch
        ids = torch.tensor(tokens, dtype=torch.long, device=self.device)[:, None]
        if not any(pads):
            return Inputs(ids, None, None)
        pad = torch.tensor(pads, device=self.device)[:, None]
        positions = length - pad
        allowed = torch.arange(length + 1, device=self.device)[None, :] >= pad
        if not self.prepared:
            return Inputs(ids, positions, allowed.long())
        return Inputs(ids, positions, self._additive(allowed[:, None, None, :]))

    def _additive(self, allowed: Any) -> Any:
        torch = self.torch
        mask = torch.zeros(allowed.shape, dtype=self.dtype, device=self.device)
        return mask.masked_fill_(~allowed, torch.finfo(self.dtype).min)
