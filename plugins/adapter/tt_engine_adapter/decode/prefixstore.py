"""Prompt prefixes kept across forward passes: their keys and values, by owner and ids, least recently used
dropped first within a bound in bytes (engine environment; holds tensors, imports nothing).

An `Entry` is the per-layer keys and values `[1, heads, length, dim]` of one prefix of ids run alone (one row,
no padding, positions from 0) by one owner: the model with one adapter's LoRA (the server's key is the
adapter's unique id, so one adapter's entry never answers for another, nor for a replaced version of itself).
`PrefixStore.get` finds the entry of exactly (owner, ids); `put` stores one, evicting the least recently used
until the bytes fit, and keeps none larger than the whole bound (the caller still uses it for the pass it was
built for). Which prefix to keep, and when, is the caller's (the server's `serve/reuse.py`).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Hashable, Optional, Sequence


@dataclass(eq=False)
class Entry:
    """One prefix's per-layer keys and values, computed alone."""

    keys: list[Any]
    values: list[Any]
    length: int  # prompt positions it holds

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.keys + self.values)


class PrefixStore:
    """Entries by (owner, ids), at most `limit` bytes in all, least recently used evicted first."""

    def __init__(self, limit: int):
        self.limit = limit
        self._entries: OrderedDict[tuple[Hashable, tuple[int, ...]], Entry] = OrderedDict()
        self.bytes = 0
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, owner: Hashable, ids: Sequence[int]) -> Optional[Entry]:
        """The entry of exactly these ids run by `owner`, now the most recently used; None when not kept."""
        key = (owner, tuple(ids))
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
        return entry

    def put(self, owner: Hashable, ids: Sequence[int], entry: Entry) -> bool:
        """Keep `entry` for (owner, ids), evicting least recently used entries until it fits; False (nothing
        evicted, nothing kept) when it alone is larger than the bound."""
        size = entry.nbytes
        if size > self.limit:
            return False
        key = (owner, tuple(ids))
        old = self._entries.pop(key, None)
        if old is not None:
            self.bytes -= old.nbytes
        while self._entries and self.bytes + size > self.limit:
            _, evicted = self._entries.popitem(last=False)
            self.bytes -= evicted.nbytes
            self.evictions += 1
        self._entries[key] = entry
        self.bytes += size
        return True

    def owners(self) -> set[Hashable]:
        return {owner for owner, _ in self._entries}
