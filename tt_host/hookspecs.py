"""The plugin surface of tt: the hooks an engine or observer plugin may implement.

Plugins are found through the entry-point group `tt`. Each entry point names a
module (or object) with `@hookimpl`-decorated functions.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

import pluggy

PROJECT = "tt"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def tt_engines() -> Iterable["tt_host.engine.Engine"]:  # noqa: F821
    """Yield the `Engine` records this plugin provides (usually one)."""


@hookspec
def tt_stage_event(run_dir: str, stage: str, event: Mapping[str, Any]) -> None:
    """Observe one stage event (progress, metrics, log, artifact, stage_start, stage_end).

    Called in order for every event of every stage. An observer that raises is
    logged and ignored; it never stops a run.
    """
