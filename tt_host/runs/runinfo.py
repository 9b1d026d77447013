"""`RunInfo`: what observer plugins are told about a run (the `tt_run_start` and `tt_run_end` hooks).

A frozen record, built once by the host when a run starts. Trackers are opt-in:
an observer acts on a run only when `run.settings(<its name>)` is not None,
that is when the spec's `observers` block names it or `TT_OBSERVERS`
(comma-separated names) lists it. Names in `TT_OBSERVERS` that the spec does
not configure get empty settings (each observer's defaults and its own
environment variables).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping, Optional


def enabled_observers(block: Mapping[str, Mapping[str, Any]], environ: Mapping[str, str] = os.environ
                      ) -> dict[str, dict[str, Any]]:
    """The spec's `observers` block plus the names in TT_OBSERVERS (with empty settings)."""
    chosen = {name: dict(settings) for name, settings in block.items()}
    for name in (n.strip() for n in environ.get("TT_OBSERVERS", "").split(",")):
        if name:
            chosen.setdefault(name, {})
    return chosen


@dataclass(frozen=True)
class RunInfo:
    """One run, as observers see it. `spec` is the validated spec (JSON form)."""

    run_dir: Path
    run_id: str
    spec_name: str
    engine: str
    spec: Mapping[str, Any]
    system_message: str
    system_message_sha256: str
    resumed: bool = False
    observers: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "observers", MappingProxyType({k: MappingProxyType(dict(v))
                                                                for k, v in self.observers.items()}))

    def settings(self, name: str) -> Optional[Mapping[str, Any]]:
        """This observer's settings when the run enables it, else None (the observer stays silent)."""
        return self.observers.get(name)
