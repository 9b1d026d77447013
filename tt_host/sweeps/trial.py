"""One sweep trial, and the winner's held-out run: each an ordinary run driven by tt_host.runs.drive.

Runs in the host's interpreter. A trial is the spec with the trial's settings set (`--set`, so its run
records and fingerprints them like any override), cut to its training examples with the selection rows as
the evaluated side (tt_host.sweeps.selection), run in its own folder and registering no model; its score
is the run's `candidate.<objective>` over the selection rows. The winner's run is the full spec with the
winning settings, trained on every training example and scored once on the held-out set; it registers its
model like any run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Optional

from tt_host.plugins import Plugins
from tt_host.runs.drive import RunOutcome, execute
from tt_host.runs.progress import QuietReporter
from tt_host.spec.loading import LoadedSpec, load_spec
from tt_host.sweeps.selection import Carved, trial_spec


class TrialSpecError(ValueError):
    """The spec with a trial's settings is invalid (a value the probes did not try)."""


def overrides(params: dict[str, Any]) -> tuple[str, ...]:
    return tuple(f"{key}={json.dumps(value)}" for key, value in sorted(params.items()))


def with_params(base: LoadedSpec, plugins: Plugins, params: dict[str, Any]) -> LoadedSpec:
    loaded = load_spec(base.path, plugins, config=base.config, overrides=base.overrides + list(overrides(params)))
    if not loaded.valid:
        raise TrialSpecError("; ".join(f"{e.loc}: {e.msg}" for e in loaded.errors))
    return loaded


@dataclass(frozen=True)
class Scored:
    outcome: RunOutcome
    score: Optional[float]
    count: int
    model_id: Optional[str]


def scored(outcome: RunOutcome, objective: str) -> Scored:
    metrics = (outcome.report or {}).get("metrics") or {}
    value = metrics.get(f"candidate.{objective}")
    models = (outcome.report or {}).get("models") or []
    return Scored(outcome, float(value) if isinstance(value, (int, float)) else None,
                  int(metrics.get("candidate.count") or 0), models[-1]["id"] if models else None)


def run_trial(base: LoadedSpec, plugins: Plugins, carved: Carved, params: dict[str, Any], run_dir: Path,
              objective: str, device: Optional[str], reporter: QuietReporter) -> Scored:
    loaded = replace(trial_spec(with_params(base, plugins, params), carved), register_models=False)
    return scored(execute(loaded, plugins, run_dir=run_dir, device=device, reporter=reporter), objective)


def run_winner(base: LoadedSpec, plugins: Plugins, params: dict[str, Any], run_dir: Path, objective: str,
               device: Optional[str], reporter: QuietReporter) -> Scored:
    loaded = with_params(base, plugins, params)
    return scored(execute(loaded, plugins, run_dir=run_dir, device=device, reporter=reporter), objective)
