"""How a run ended, as facts: the one record the run's driver hands the reports wing (host interpreter).

A run ends in one of four ways (`ENDINGS`): completed, failed (a stage failed, or its input was invalid),
stopped (Ctrl-C, SIGTERM) or out of disk (tt_host.runs.diskfull). Whoever ends a run (tt_host.runs.drive,
tt_host.runs.diskfull) fills an `Ending` with what happened — run.json as saved, the `Tally` of its finished
stages, the error, the spec's gates and the held-out rows — and never a key of report.json: which keys the
report has, and in what order, is decided by tt_host.reports.report.build_report alone. `resume_command` is the
one spelling of the command that resumes a run (the report's `resume`, the disk-full message, `tt run`'s hint).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:  # annotations only
    from tt_host.spec.general import GeneralSet
    from tt_stagekit.graders import GraderSet

COMPLETED, FAILED, STOPPED, OUT_OF_DISK = "completed", "failed", "stopped", "out of disk"
ENDINGS = (COMPLETED, FAILED, STOPPED, OUT_OF_DISK)
RESUMABLE = (STOPPED, OUT_OF_DISK)  # the endings whose report says how to resume the run


def resume_command(spec_path: Path | str, run_path: Path | str) -> str:
    """The command that resumes the run in `run_path` of the spec at `spec_path`."""
    return f"tt run {spec_path} --resume {run_path}"


@dataclass
class Tally:
    """What the finished stages of a run add up to (tt_host.runs.results.take_result fills it), for the report."""

    metrics: dict[str, Any] = field(default_factory=dict)
    series: dict[str, list] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    models: list[dict[str, Any]] = field(default_factory=list)
    actions: dict[str, str] = field(default_factory=dict)  # what this invocation did with each stage it reached
    completed: dict[str, Any] = field(default_factory=dict)  # stage -> its folder and result, for the stages after
    general_answers: dict[str, dict[str, str]] = field(default_factory=dict)
    benchmark_scores: dict[str, dict[str, Any]] = field(default_factory=dict)  # side -> lm-eval scores
    answers: dict[str, dict[str, str]] = field(default_factory=dict)  # side -> held-out predictions by row id
    held_out_sides: dict[str, str] = field(default_factory=dict)  # "baseline"/"sft"/"candidate" -> its metric prefix


@dataclass(frozen=True)
class Ending:
    """The facts of a run's end. `state`: run.json as saved; `spec_path`, `run_path`: what resumes it;
    `eval_rows` and `graders`: the held-out rows with their references (kept on the host) and the spec's graders,
    to join the sides' answers into predictions; `general_policy`, `general`, `benchmarks`: the spec's gates
    (None: no such gate, or not judged)."""

    how: str
    state: dict[str, Any]
    spec_path: Path
    run_path: Path
    tally: Tally = field(default_factory=Tally)
    error: Optional[str] = None
    eval_rows: list[dict[str, Any]] = field(default_factory=list)
    graders: Optional["GraderSet"] = None
    general_policy: Any = None
    general: Optional["GeneralSet"] = None
    benchmarks: Any = None

    def __post_init__(self) -> None:
        if self.how not in ENDINGS:
            raise ValueError(f"a run ends {', '.join(ENDINGS)}; not {self.how!r}")
