"""The sweep's Optuna study: where it is kept, how a trial is asked for, and which trials count.

Runs in the host's interpreter. The study lives in SQLite under the sweep's folder (`study.db`), or in the
database `--storage URL` names (any SQLAlchemy URL Optuna's RDBStorage takes), which several `tt sweep`
workers on several machines share. A trial is asked for only while fewer than `trials` trials count
(complete, pruned, running, waiting, or failed by its own run); two workers that ask at the same moment get
distinct trial numbers from the database, and the one whose number finds `trials` counted trials before it
gives its trial back (failed, marked `surplus`) without running it, so no trial is run twice and the study
ends with `trials` counted trials.

A trial whose worker died (killed) is failed and put back, waiting, with the same settings and run folder
(`retry`): on the same machine at once (its worker's process is gone), on others when Optuna's heartbeat
says it is stale (`HEARTBEAT_S`, `GRACE_S`). The retry resumes that run: its completed stages are reused.
"""

from __future__ import annotations

import fcntl
import os
import socket
import threading
import time
import warnings
from pathlib import Path
from typing import Any, Optional

import optuna
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import FrozenTrial, TrialState
from sqlalchemy.exc import SQLAlchemyError

from tt_host.sweeps.block import SweepBlock

HEARTBEAT_S = 20
GRACE_S = 120
STUDY_DB = "study.db"
OPEN_ATTEMPTS = 5
COUNTED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING, TrialState.WAITING)

optuna.logging.set_verbosity(optuna.logging.WARNING)
# the heartbeat with ask/tell (Heartbeat below records it as `optimize` would) and its experimental marks
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used with Study.optimize")


def storage_url(sweep_dir: Path, given: Optional[str]) -> str:
    return given or f"sqlite:///{sweep_dir / STUDY_DB}"


def distributions(block: SweepBlock) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, parameter in block.parameters.items():
        name, value = parameter.form()
        if name == "choice":
            out[key] = CategoricalDistribution(value)
        elif name == "int":
            out[key] = IntDistribution(value[0], value[1])
        else:
            out[key] = FloatDistribution(value[0], value[1], log=name == "log_uniform")
    return out


def retry(study: optuna.Study, trial: FrozenTrial) -> None:
    """Put a failed trial back, waiting, with its settings and run folder (the next ask takes it)."""
    study.add_trial(optuna.create_trial(state=TrialState.WAITING, params=trial.params,
                                        distributions=trial.distributions,
                                        user_attrs={k: v for k, v in trial.user_attrs.items() if k != "worker"},
                                        system_attrs={"retry_of": trial.number}))


def open_study(url: str, name: str, folder: Path) -> optuna.Study:
    """The study, created by the first worker. Two workers starting at once would both create the database's
    tables (one fails): on this machine they take turns (a lock file in the sweep's folder); workers on
    other machines try again after the other's creation."""
    # SQLite: a worker waits for another's write instead of failing on "database is locked"
    engine = {"connect_args": {"timeout": 120}} if url.startswith("sqlite") else None
    with open(folder / ".study.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for attempt in range(OPEN_ATTEMPTS):
            try:
                storage = optuna.storages.RDBStorage(url, engine_kwargs=engine, heartbeat_interval=HEARTBEAT_S,
                                                     grace_period=GRACE_S, heartbeat_stale_trial_callback=retry)
                return optuna.create_study(storage=storage, study_name=name, direction="maximize",
                                           load_if_exists=True)
            except SQLAlchemyError:
                if attempt == OPEN_ATTEMPTS - 1:
                    raise
                time.sleep(1 + attempt)
    raise AssertionError("unreachable")


def sampler(block: SweepBlock, salt: int) -> optuna.samplers.BaseSampler:
    """A sampler of the block's kind, seeded by the sweep's seed and (TPE, random) how many trials the study
    holds, so that workers asking one after another do not draw the same settings."""
    if block.sampler == "grid":  # its seed orders the grid: one seed for the whole study, or points repeat
        return optuna.samplers.GridSampler(block.grid(), seed=block.seed)
    seed = (block.seed * 1_000_003 + salt) % 2**31
    if block.sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    return optuna.samplers.TPESampler(seed=seed, constant_liar=True)


def _worker() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{_start_time(os.getpid())}"


def _start_time(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return "?"


def _dead_here(worker: Any) -> bool:
    """Whether a trial's worker ran on this machine and its process is gone."""
    if not isinstance(worker, str) or worker.count(":") < 2:
        return False
    host, pid, started = worker.rsplit(":", 2)
    return host == socket.gethostname() and pid.isdigit() and _start_time(int(pid)) != started


def recover(study: optuna.Study) -> list[int]:
    """Fail and put back the running trials whose worker died; the numbers put back."""
    optuna.storages.fail_stale_trials(study)  # other machines' workers, by heartbeat (each put back by `retry`)
    back = []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if _dead_here(trial.user_attrs.get("worker")):
            try:  # only the worker whose update fails the trial puts it back (two may find it at once)
                if not study._storage.set_trial_state_values(trial._trial_id, TrialState.FAIL):
                    continue
            except optuna.exceptions.UpdateFinishedTrialError:
                continue
            retry(study, trial)
            back.append(trial.number)
    return back


def counted(trials: list[FrozenTrial]) -> list[FrozenTrial]:
    return [t for t in trials if t.state in COUNTED or (t.state == TrialState.FAIL and t.user_attrs.get("run_failed"))]


def ask(study: optuna.Study, block: SweepBlock, goal: int) -> Optional[optuna.Trial]:
    """The next trial to run, or None when `goal` trials count already."""
    if len(counted(study.get_trials(deepcopy=False))) >= goal:
        return None
    study.sampler = sampler(block, len(study.get_trials(deepcopy=False)))
    trial = study.ask(distributions(block))
    before = [t for t in counted(study.get_trials(deepcopy=False)) if t.number < trial.number]
    if len(before) >= goal:  # another worker took the last one at the same moment
        trial.set_user_attr("surplus", True)
        study.tell(trial, state=TrialState.FAIL)
        return None
    trial.set_user_attr("worker", _worker())
    return trial


class Heartbeat:
    """Records the trial's heartbeat while it runs (Optuna's `optimize` does this itself; ask/tell does not)."""

    def __init__(self, study: optuna.Study, trial: optuna.Trial) -> None:
        self.storage, self.trial_id, self.done = study._storage, trial._trial_id, threading.Event()
        self.thread = threading.Thread(target=self._beat, daemon=True)

    def _beat(self) -> None:
        while not self.done.wait(HEARTBEAT_S):
            try:
                self.storage.record_heartbeat(self.trial_id)
            except Exception:  # a missed beat only makes the trial look stale later; never stop the run for it
                pass

    def __enter__(self) -> "Heartbeat":
        self.storage.record_heartbeat(self.trial_id)
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join(timeout=5)
