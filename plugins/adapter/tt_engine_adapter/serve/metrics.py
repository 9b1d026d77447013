"""The server's counters and gauges, shown at `GET /metrics` in the Prometheus text format.

Updated from the event loop and from the generation thread, so every change
takes a lock. Counters only grow; gauges are the state at the moment of the
scrape.
"""

from __future__ import annotations

import threading
from typing import Any

HELP = {
    "tt_serve_requests_accepted": ("gauge", "chat requests accepted and not finished (waiting or running)"),
    "tt_serve_requests_waiting": ("gauge", "accepted chat requests waiting for a place in the running batch"),
    "tt_serve_requests_running": ("gauge", "sequences in the running batch"),
    "tt_serve_requests_total": ("counter", "chat requests answered or cancelled"),
    "tt_serve_requests_refused_total": ("counter", "chat requests refused with 429 (server full)"),
    "tt_serve_requests_cancelled_total": ("counter", "generations stopped because the client went away"),
    "tt_serve_generated_tokens_total": ("counter", "tokens generated, all sequences"),
    "tt_serve_decode_steps_total": ("counter", "forward passes of the model during decoding (one per batch step)"),
    "tt_serve_prefills_total": ("counter", "prompt forward passes"),
    "tt_serve_batch_rows_max": ("gauge", "the most sequences decoded in one step since the server started"),
    "tt_serve_prefix_hits_total": ("counter", "requests whose prompt start (system prompt) was kept: only the rest "
                                              "was prefilled"),
    "tt_serve_prefix_misses_total": ("counter", "prompt starts run alone and kept (the first request of each)"),
    "tt_serve_prefix_reused_tokens_total": ("counter", "prompt tokens not prefilled again: read from kept starts"),
    "tt_serve_prefix_cache_bytes": ("gauge", "bytes of keys and values the kept prompt starts hold"),
}


class Metrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, float] = {name: 0 for name in HELP}

    def add(self, name: str, amount: float = 1) -> None:
        with self._lock:
            self._values[name] += amount

    def set(self, name: str, value: float) -> None:
        with self._lock:
            self._values[name] = value

    def high(self, name: str, value: float) -> None:
        """Raise a high-water mark."""
        with self._lock:
            self._values[name] = max(self._values[name], value)

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return dict(self._values)

    def render(self) -> str:
        lines = []
        for name, value in self.snapshot().items():
            kind, text = HELP[name]
            shown = str(int(value)) if float(value).is_integer() else repr(float(value))
            lines += [f"# HELP {name} {text}", f"# TYPE {name} {kind}", f"{name} {shown}"]
        return "\n".join(lines) + "\n"
