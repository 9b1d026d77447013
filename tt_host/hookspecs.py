"""The plugin surface of tt: the hooks an engine or observer plugin may implement.

Plugins are found through the entry-point group `tt`. Each entry point names a
module (or object) with `@hookimpl`-decorated functions. An engine implements
`tt_engines`; an observer any of `tt_run_start`, `tt_stage_event`, `tt_run_end`
(called in that order, on the observer's own thread, see tt_host.runs.observers).
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

    Called in order for every event of every stage. After the host scores a
    stage's predictions it sends `{"type": "scores", "stage", "values"}` for that
    stage, and once the general-regression gate is decided `{"type": "gate", ...}`
    (the report's `general_regression` section) with stage `"gate"`. An observer
    that raises, exits or hangs is reported once and never stops a run.
    """


@hookspec
def tt_run_start(run: "tt_host.runs.runinfo.RunInfo") -> None:  # noqa: F821
    """A run starts (or resumes): its folder, spec, compiled system message and observer settings."""


@hookspec
def tt_run_end(run: "tt_host.runs.runinfo.RunInfo", report: Mapping[str, Any]) -> None:  # noqa: F821
    """A run ended (completed, failed or interrupted); `report` is what report.json holds."""
