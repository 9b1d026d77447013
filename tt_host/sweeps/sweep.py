"""Driving a sweep: the folder, the study, the trials, the winner's one held-out run, the report.

Runs in the host's interpreter (`tt sweep`, tt_host.cli.sweep). The sweep's folder is
`<spec folder>/.tuned-tensor/sweeps/<spec name>-<digest>`, the digest of the spec (as validated, without the
block) and the block (without `trials`), so running the same command again continues the same study: a
completed trial is never run again, a trial whose worker was killed is run again in its own folder (its run
resumes, its completed stages reused). Layout:

    <sweep>/study.db          the Optuna study (unless --storage names a shared database)
    <sweep>/trials/<number>/  each trial's run (trained without the selection rows, scored on them)
    <sweep>/final/            the winner's run: all training examples, the held-out set scored once
    <sweep>/report.json, report.md, report.html, score-<setting>.svg   (tt_host.reports.sweep_report)

The held-out set is scored once, for the winner only, after every trial has finished: the choice is made
on selection scores alone, so the held-out score is an honest estimate and `optimism` (the winner's
selection score minus its held-out score) says how much the choice flattered it.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from optuna.trial import TrialState

from tt_host import runlayout
from tt_host.canonical import canonical
from tt_host.plugins import Plugins
from tt_host.runs.opening import RunRefused
from tt_host.runs.plan import spec_digest
from tt_host.runs.progress import QuietReporter
from tt_host.spec.loading import LoadedSpec
from tt_host.sweeps import study as studies
from tt_host.sweeps.block import SweepBlock
from tt_host.sweeps.selection import Carved, carve
from tt_host.sweeps.trial import Scored, TrialSpecError, run_trial, run_winner
from tt_stagekit.contract import EXIT_INTERRUPTED, EXIT_OK

SWEEPS_FOLDER = (".tuned-tensor", "sweeps")


def sweep_dir(loaded: LoadedSpec, block: SweepBlock) -> Path:
    digest = hashlib.sha256(canonical({"spec": spec_digest(loaded), "sweep": block.digest_json()}).encode())
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", loaded.spec.name).strip("-.")[:40] or "spec"
    return loaded.path.parent.joinpath(*SWEEPS_FOLDER, f"{name}-{digest.hexdigest()[:12]}")


@dataclass
class Sweep:
    """Everything one `tt sweep` worker needs."""

    loaded: LoadedSpec
    plugins: Plugins
    block: SweepBlock
    folder: Path
    storage: str
    device: Optional[str]
    reporter: QuietReporter
    say: Callable[[str], None]

    @property
    def carved(self) -> Carved:
        return carve(self.loaded, self.block.selection_fraction)


class Interrupted(Exception):
    """The sweep was stopped (Ctrl-C, SIGTERM) during a trial; the trial waits to be run again."""


def run_trials(sweep: Sweep, carved: Carved) -> None:
    """Ask for and run trials until the study holds `trials` counted trials."""
    study = studies.open_study(sweep.storage, sweep.folder.name, sweep.folder)
    for number in studies.recover(study):
        sweep.say(f"trial {number}: its worker is gone; put back to run again (its run resumes)")
    goal = _goal(sweep.block)
    while (trial := studies.ask(study, sweep.block, goal)) is not None:
        params = dict(trial.params)
        run_dir = Path(trial.user_attrs.get("run_dir") or sweep.folder / "trials" / f"{trial.number:04d}")
        trial.set_user_attr("run_dir", str(run_dir))
        sweep.say(f"trial {trial.number}: {_shown(params)}")
        try:
            with studies.Heartbeat(study, trial):
                result = run_trial(sweep.loaded, sweep.plugins, carved, params, run_dir, sweep.block.objective,
                                   sweep.device, sweep.reporter)
        except TrialSpecError as exc:  # a value inside the searched range the spec refuses
            trial.set_user_attr("run_failed", str(exc))
            _tell(study, trial, None, TrialState.FAIL)
            sweep.say(f"trial {trial.number}: the spec refuses these settings: {exc}")
            continue
        except (KeyboardInterrupt, RunRefused) as exc:
            _give_back(study, trial)
            if isinstance(exc, KeyboardInterrupt):
                raise Interrupted() from None
            raise
        if result.outcome.exit_code == EXIT_INTERRUPTED:
            _give_back(study, trial)
            raise Interrupted()
        trial.set_user_attr("selection_count", result.count)
        if result.outcome.exit_code != EXIT_OK or result.score is None:
            trial.set_user_attr("run_failed", result.outcome.error or f"run {result.outcome.status}")
            _tell(study, trial, None, TrialState.FAIL)
            sweep.say(f"trial {trial.number}: failed ({result.outcome.error or result.outcome.status}); "
                      f"see {run_dir}")
            continue
        _tell(study, trial, result.score, TrialState.COMPLETE)
        sweep.say(f"trial {trial.number}: selection {sweep.block.objective} {result.score:.4g} "
                  f"({result.count} prompts)")


def _goal(block: SweepBlock) -> int:
    if block.sampler == "grid":
        size = 1
        for values in (block.grid() or {}).values():
            size *= len(values)
        return min(block.trials, size)
    return block.trials


def _give_back(study, trial) -> None:
    """A trial this worker stopped: failed, and put back waiting with its settings and run folder."""
    frozen = study._storage.get_trial(trial._trial_id)
    _tell(study, trial, None, TrialState.FAIL)
    studies.retry(study, study._storage.get_trial(frozen._trial_id))


def _tell(study, trial, value: Optional[float], state: TrialState) -> None:
    try:
        study.tell(trial, value, state=state)
    except RuntimeError:  # the grid sampler stops the study after its last grid point (told all the same)
        pass


def _shown(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in sorted(params.items()))


def trials_table(sweep: Sweep) -> list[dict[str, Any]]:
    """Every trial that counts, in number order: the `--json` and report rows."""
    study = studies.open_study(sweep.storage, sweep.folder.name, sweep.folder)
    rows = []
    for trial in sorted(studies.counted(study.get_trials(deepcopy=False)), key=lambda t: t.number):
        rows.append({"number": trial.number, "params": dict(trial.params),
                     "selection_score": trial.value if trial.state == TrialState.COMPLETE else None,
                     "run_dir": trial.user_attrs.get("run_dir"), "state": trial.state.name.lower(),
                     "selection_count": trial.user_attrs.get("selection_count")})
    return rows


def pick_winner(rows: list[dict[str, Any]]) -> Optional[dict[str, Any]]:
    """The completed trial with the best selection score (the lowest number on a tie); the held-out set
    plays no part."""
    done = [r for r in rows if r["state"] == "complete" and r["selection_score"] is not None]
    return max(done, key=lambda r: (r["selection_score"], -r["number"])) if done else None


def finish(sweep: Sweep, winner: dict[str, Any]) -> Scored:
    """The winner's run: retrained on every training example, the held-out set scored once."""
    sweep.say(f"winner: trial {winner['number']} ({_shown(winner['params'])}); training it on every training "
              "example and scoring the held-out set once")
    return run_winner(sweep.loaded, sweep.plugins, winner["params"], sweep.folder / "final", sweep.block.objective,
                      sweep.device, sweep.reporter)
