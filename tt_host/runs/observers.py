"""Delivering a run to observer plugins, so that no observer can fail, stop or stall a run.

Each plugin that implements an observer hook (`tt_run_start`, `tt_stage_event`,
`tt_run_end`, see tt_host.hookspecs) gets its own worker thread and queue: the
host hands it each call in order and goes on at once. A call that raises
anything (an exception, `sys.exit`, `KeyboardInterrupt`) is reported once per
plugin and the plugin keeps receiving the run's later calls; a call that has
not returned after `TT_OBSERVER_TIMEOUT_SECONDS` (default 120) is reported once
and the plugin gets nothing more for this run (its thread is a daemon and is
left behind). `close()` waits for every queue to drain under the same limit,
so trackers have flushed when `tt run` returns.

Reports are made on the caller's thread (the one that feeds the stages'
events), never from a worker.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Optional

import pluggy

from tt_host.plugins import Plugins, call_hookimpl
from tt_host.runs.runinfo import RunInfo

HOOKS = ("tt_run_start", "tt_stage_event", "tt_run_end")
DEFAULT_TIMEOUT_SECONDS = 120.0
_POLL_SECONDS = 0.05


def call_limit() -> float:
    """Seconds one observer call may take (`TT_OBSERVER_TIMEOUT_SECONDS`, default 120)."""
    text = os.environ.get("TT_OBSERVER_TIMEOUT_SECONDS", "").strip()
    try:
        value = float(text) if text else DEFAULT_TIMEOUT_SECONDS
    except ValueError:
        value = DEFAULT_TIMEOUT_SECONDS
    return value if value > 0 else DEFAULT_TIMEOUT_SECONDS


def _what(hook: str, kwargs: Mapping[str, Any]) -> str:
    """How a report names the call: `run start`, `run end`, or the event's type (`progress`, `stage_end`, ...)."""
    event = kwargs.get("event")
    if isinstance(event, Mapping):
        return str(event.get("type"))
    return hook.removeprefix("tt_").replace("_", " ")


@dataclass
class _Worker:
    """One observer plugin's thread: its calls run there, one at a time, in order."""

    name: str
    impls: dict[str, pluggy.HookImpl]
    queue: "queue.Queue[Optional[tuple[str, dict[str, Any]]]]" = field(default_factory=queue.Queue)
    busy_since: Optional[float] = None
    busy_with: str = ""
    failure: Optional[str] = None
    reported: bool = False
    hung: bool = False

    def __post_init__(self) -> None:
        self.thread = threading.Thread(target=self._loop, name=f"tt-observer-{self.name}", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while (item := self.queue.get()) is not None:
            hook, kwargs = item
            self.busy_with, self.busy_since = _what(hook, kwargs), time.monotonic()
            try:
                call_hookimpl(self.impls[hook], hook, **kwargs)
            except BaseException as exc:  # noqa: BLE001 - call_hookimpl contains SystemExit/KeyboardInterrupt already
                if self.failure is None:
                    self.failure = f"observer {self.name!r} failed on {self.busy_with}: {str(exc) or type(exc).__name__}"
            finally:
                self.busy_since = None

    def overdue(self, limit: float) -> bool:
        started = self.busy_since
        return started is not None and time.monotonic() - started > limit


class Observers:
    """The observer plugins of one run; `report(text)` shows a problem to the user (once per plugin)."""

    def __init__(self, plugins: Plugins, report: Callable[[str], None], limit: Optional[float] = None) -> None:
        self.limit = call_limit() if limit is None else limit
        self._report = report
        found: dict[str, dict[str, pluggy.HookImpl]] = {}
        for hook in HOOKS:
            caller = getattr(plugins.manager.hook, hook, None)
            for impl in caller.get_hookimpls() if caller is not None else ():
                found.setdefault(impl.plugin_name, {})[hook] = impl
        self._workers = [_Worker(name, impls) for name, impls in sorted(found.items())]

    def _send(self, hook: str, **kwargs: Any) -> None:
        self.check()
        for worker in self._workers:
            if hook in worker.impls and not worker.hung:
                worker.queue.put((hook, kwargs))

    def run_start(self, run: RunInfo) -> None:
        self._send("tt_run_start", run=run)

    def event(self, run_dir: str, stage: str, event: Mapping[str, Any]) -> None:
        self._send("tt_stage_event", run_dir=run_dir, stage=stage, event=event)

    def run_end(self, run: RunInfo, report: Mapping[str, Any]) -> None:
        self._send("tt_run_end", run=run, report=report)

    def check(self) -> None:
        """Report new failures and calls past the time limit (each plugin once)."""
        for worker in self._workers:
            if worker.failure and not worker.reported:
                worker.reported = True
                self._report(f"{worker.failure}; the run goes on (tt reports an observer's first failure only)")
            if not worker.hung and worker.overdue(self.limit):
                worker.hung = True
                self._report(f"observer {worker.name!r} did not return from {worker.busy_with} within "
                             f"{self.limit:g}s (TT_OBSERVER_TIMEOUT_SECONDS); tt stops calling it for this run")

    def close(self) -> None:
        """Let every observer finish its queued calls (each under the time limit), then report.
        Ctrl-C while waiting stops the wait: the run is already recorded, only tracking is cut short."""
        for worker in self._workers:
            if not worker.hung:
                worker.queue.put(None)
        try:
            for worker in self._workers:
                while worker.thread.is_alive() and not worker.hung:
                    worker.thread.join(_POLL_SECONDS)
                    self.check()
        except KeyboardInterrupt:
            waiting = [w.name for w in self._workers if w.thread.is_alive() and not w.hung]
            self._report(f"stopped waiting for observers {', '.join(map(repr, waiting))}; their tracking may be "
                         "incomplete")
            return
        self.check()

    def unknown(self, names: Iterable[str]) -> list[str]:
        """The enabled observer names (spec `observers`, TT_OBSERVERS) no observer plugin answers to: a plugin
        answers to its entry point name, with or without the `observer-` prefix."""
        plugins = set(self.names)
        return [n for n in names if n not in plugins and f"observer-{n}" not in plugins]

    @property
    def names(self) -> list[str]:
        """The observer plugins of this run (entry point names)."""
        return [w.name for w in self._workers]
