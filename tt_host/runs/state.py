"""The shape of `run.json`: a typed `RunState` holding one `StageRecord` per stage.

`run.json` is written atomically after every change of state (tt_host.runs.store.RunDir.save). Its
bytes for a given run are those of the plain dict the host wrote before these types existed: keys in
the order below, a field absent until first set (`ABSENT`), `null` where the host sets None (a
running stage's `exit_code` and `error`). Keys this version does not know (a run.json written by
another tt) are kept, after the known ones.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

RUN_FORMAT = 1

# A stage's states in run.json
PENDING, RUNNING, COMPLETED, FAILED, INTERRUPTED, SKIPPED = (
    "pending", "running", "completed", "failed", "interrupted", "skipped")
STARTED = (COMPLETED, INTERRUPTED, RUNNING)  # a stage that holds work of this run directory
# A run's status in run.json (and report.json)
RUN_RUNNING, RUN_COMPLETED, RUN_FAILED, RUN_INTERRUPTED = "running", "completed", "failed", "interrupted"


class _Absent:
    """A field not (yet) in run.json."""

    def __repr__(self) -> str:
        return "ABSENT"

    def __bool__(self) -> bool:
        return False


ABSENT: Any = _Absent()


def _to_json(record: Any) -> dict[str, Any]:
    data = {f.name: getattr(record, f.name) for f in dataclasses.fields(record) if f.name != "extra"}
    data = {key: value for key, value in data.items() if value is not ABSENT}
    return {**data, **record.extra}


def _known(cls: type, data: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
    return ({k: v for k, v in data.items() if k in names}, {k: v for k, v in data.items() if k not in names})


@dataclass
class StageRecord:
    """One stage in run.json: its state, the fingerprint and inputs it ran with, when and how it ended."""

    state: str = PENDING
    fingerprint: Any = ABSENT
    inputs: Any = ABSENT
    started_at: Any = ABSENT
    exit_code: Any = ABSENT
    error: Any = ABSENT
    finished_at: Any = ABSENT
    seconds: Any = ABSENT
    result_sha256: Any = ABSENT
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "StageRecord":
        known, extra = _known(cls, data)
        return cls(**known, extra=extra)

    def to_json(self) -> dict[str, Any]:
        return _to_json(self)

    def skipped(self, fingerprint: str, inputs: Mapping[str, Any]) -> None:
        self.state, self.fingerprint, self.inputs = SKIPPED, fingerprint, inputs

    def started(self, fingerprint: str, inputs: Mapping[str, Any], at: str) -> None:
        self.state, self.fingerprint, self.inputs, self.started_at = RUNNING, fingerprint, inputs, at
        self.exit_code = self.error = None

    def ended(self, at: str, exit_code: int, seconds: float) -> None:
        self.finished_at, self.exit_code, self.seconds = at, exit_code, seconds

    def failed(self, state: str, error: Any) -> None:
        self.state, self.error = state, error


@dataclass
class RunState:
    """run.json: what made the run (engine, spec, versions, environment), its status and its stages."""

    format: int = RUN_FORMAT
    id: Any = ABSENT
    engine: Any = ABSENT
    engine_distribution: Any = ABSENT
    engine_version: Any = ABSENT
    host_version: Any = ABSENT
    spec_name: Any = ABSENT
    spec_path: Any = ABSENT
    spec_sha256: Any = ABSENT
    system_message_sha256: Any = ABSENT
    split: Any = ABSENT  # the held-out split (tt_host.spec.split.RecordedSplit.to_json); absent in older runs
    env_key: Any = ABSENT
    created_at: Any = ABSENT
    status: str = RUN_RUNNING
    stages: dict[str, StageRecord] = field(default_factory=dict)
    updated_at: Any = ABSENT
    error: Any = ABSENT
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "RunState":
        known, extra = _known(cls, data)
        stages = {name: StageRecord.from_json(record) for name, record in (known.pop("stages", None) or {}).items()}
        return cls(**known, stages=stages, extra=extra)

    def to_json(self) -> dict[str, Any]:
        data = _to_json(self)
        data["stages"] = {name: record.to_json() for name, record in self.stages.items()}
        return data

    def stage(self, name: str) -> StageRecord:
        """The stage's record, added as pending when this run.json predates the stage."""
        return self.stages.setdefault(name, StageRecord())
