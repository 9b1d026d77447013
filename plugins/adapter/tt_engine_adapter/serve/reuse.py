"""The server's prompt starts kept across requests (`--prefix-cache-mb`; engine environment, scheduler thread only).

Every chat request to a model begins with the same ids: the chat template's start with the compiled system
prompt (`ChatModel.shared_start` says how many, per request: `Job.shared`). The first request that starts so
runs that start alone (one row, no padding, with its adapter's LoRA) into a kept `decode.prefixstore.Entry`;
it and every later request with the same start and the same adapter prefill only their remaining ids over
the entry's keys and values (`Forward.prefill_after`), each at its place in the whole prompt, so a row
computes what it would alone. Entries are keyed by the adapter's unique id (a multi-adapter server's
`Entry.uid`, new for a replaced version; "" for a server of one model) and the prefix's ids; they live in a
least-recently-used store bounded in bytes. Off when the bound is 0, and for a model whose attention cannot
take a cached prefix (`decode.prefix.usable`: sliding-window or non-attention layers; or an attention
implementation other than sdpa and eager, whose masks the model builds itself): `note` names why, logged once.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from tt_engine_adapter.decode import prefix
from tt_engine_adapter.decode.kvcache import layers
from tt_engine_adapter.decode.prefixstore import Entry, PrefixStore

MIB = 1 << 20


class PromptReuse:
    """Kept prompt starts for one scheduler's model (see the module docstring)."""

    def __init__(self, forward: Any, metrics: Any, limit_bytes: int):
        self.forward, self.metrics = forward, metrics
        self.off = why_off(forward, limit_bytes)
        self.store = PrefixStore(limit_bytes)

    @property
    def on(self) -> bool:
        return self.off is None

    @property
    def note(self) -> str:
        """The server log's line about it (once, at start)."""
        if self.off:
            return f"prompt prefix reuse across requests off: {self.off}; every request prefills its whole prompt"
        return (f"prompt prefix reuse across requests on: the system prompt and chat template start are kept per "
                f"model or adapter, at most {self.store.limit / MIB:g} MiB (--prefix-cache-mb; 0 turns it off)")

    def prefixes(self, jobs: list[Any], adapters: Callable[[list[Any]], Any], pad_id: int) -> list[Optional[Entry]]:
        """Each job's kept start (None when it has none worth keeping), building the missing ones (under
        `adapters([job])`, the pass's LoRA context, in inference mode by the caller)."""
        built: dict[tuple, Entry] = {}
        out: list[Optional[Entry]] = []
        for job in jobs:
            length = min(job.shared, len(job.prompt) - 1)
            if not self.on or length < prefix.MIN_PREFIX:
                out.append(None)
                continue
            owner, ids = (job.adapter.uid if job.adapter is not None else ""), job.prompt[:length]
            key = (owner, tuple(ids))
            entry = self.store.get(owner, ids) or built.get(key)
            if entry is None:
                entry = built[key] = self._build(job, ids, adapters, pad_id)
                self.store.put(owner, ids, entry)
                self.metrics.add("tt_serve_prefix_misses_total")
            else:
                self.metrics.add("tt_serve_prefix_hits_total")
                self.metrics.add("tt_serve_prefix_reused_tokens_total", length)
            out.append(entry)
        self.metrics.set("tt_serve_prefix_cache_bytes", self.store.bytes)
        return out

    def _build(self, job: Any, ids: list[int], adapters: Callable[[list[Any]], Any], pad_id: int) -> Entry:
        with adapters([job]):
            _, cache, _ = self.forward.prefill([ids], pad_id)
        keys, values = layers(cache)
        return Entry([k.contiguous() for k in keys], [v.contiguous() for v in values], len(ids))


def why_off(forward: Any, limit_bytes: int) -> Optional[str]:
    """Why the server cannot keep prompt starts for `forward`'s model, or None when it can."""
    if limit_bytes <= 0:
        return "--prefix-cache-mb is 0"
    reason = prefix.usable(forward.model)
    if reason:
        return reason
    if not forward.masks.prepared:
        implementation = getattr(forward.model.config, "_attn_implementation", None)
        return f"its attention implementation {implementation!r} builds its own masks (sdpa and eager take a cached prefix)"
    return None
