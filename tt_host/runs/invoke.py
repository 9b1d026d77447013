"""One stage invocation: the stage's request.json (docs/protocol.md), its subprocess, and how it ended.

`RunCall` is what every stage of one `tt run` shares; `StageCall` is one stage of it, which
`run_stage_call` turns into `<run>/<stage>/request.json` and a subprocess in the engine environment
(tt_host.engines.runner), returning a `StageOutcome`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional

from tt_host.engine import Stage, gate_side
from tt_host.engines import envs
from tt_host.engines.runner import run_stage
from tt_host.fsutil import make_private_dir, write_json_atomic
from tt_host.plugins import Plugins
from tt_host import runlayout
from tt_host.runs.observers import Observers
from tt_host.runs.progress import QuietReporter
from tt_host.runs.runinfo import RunInfo
from tt_host.runs.state import COMPLETED, FAILED, INTERRUPTED
from tt_host.runs.store import RunDir
from tt_host.spec.general import GeneralSet
from tt_host.spec.loading import LoadedSpec
from tt_host.synthesis.rows import read_rows, training_rows
from tt_host.synthesis.stage import SYNTHESIZE
from tt_stagekit.contract import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EarlierStage, StageRequest


@dataclass(frozen=True)
class RunCall:
    """One `tt run` as every stage of it sees it: the validated spec, the plugins, the locked run
    directory, the `--device` choice, where progress goes, the spec's digest and whether the run existed."""

    loaded: LoadedSpec
    plugins: Plugins
    run: RunDir
    device: Optional[str]
    reporter: QuietReporter
    digest: str
    existed: bool
    observers: Optional[Observers] = None  # set once the run's state exists (tt_host.runs.drive)
    info: Optional[RunInfo] = None  # what observers are told about the run


@dataclass(frozen=True)
class StageCall:
    """One stage invocation of a run: what `run_stage_call` turns into the stage's request.json and subprocess."""

    run_call: RunCall
    env: envs.EnvInfo
    stage: Stage
    fingerprint: str
    resume: bool
    completed: Mapping[str, Any]  # earlier completed stages: {name: {"dir", "result"}}
    general: Optional[GeneralSet]


@dataclass(frozen=True)
class StageOutcome:
    """How a stage ended: its result.json (empty unless it completed), exit code, error and wall time."""

    result: dict[str, Any]
    exit_code: int
    error: Optional[str]
    seconds: float


def stage_request(call: StageCall, stage_dir: Path, result_path: Path) -> StageRequest:
    """The stage's request (docs/protocol.md); `.to_json()` is its request.json."""
    loaded, stage, general = call.run_call.loaded, call.stage, call.general
    return StageRequest(
        engine=loaded.engine.name, stage=stage.name, run_dir=call.run_call.run.path, stage_dir=stage_dir,
        result_path=result_path, spec=loaded.spec.model_dump(mode="json"), spec_dir=loaded.path.parent,
        system_message=loaded.compiled.system_message,
        system_message_sha256=loaded.compiled.system_message_sha256,
        train_rows=tuple(loaded.compiled.train_rows) + synthetic_rows(call) if stage.gets_train_rows else (),
        eval_prompts=tuple(loaded.compiled.eval_prompts()) if stage.evaluates else (),
        general_prompts=tuple(general.prompts()) if general is not None and gate_side(stage) else (),
        device=call.run_call.device or loaded.engine.spec_device(loaded.spec) or "auto",
        resume=call.resume, fingerprint=call.fingerprint,
        stages={name: EarlierStage(Path(earlier["dir"]), earlier["result"]) for name, earlier in call.completed.items()},
    )


def synthetic_rows(call: StageCall) -> tuple[dict, ...]:
    """The synthesize stage's rows, weighted, for a stage that trains on them (none otherwise)."""
    settings = getattr(call.run_call.loaded.spec, "synthesis", None)
    earlier = call.completed.get(SYNTHESIZE)
    if settings is None or earlier is None or not call.stage.gets_synthetic_rows:
        return ()
    rows = read_rows(Path(earlier["dir"]) / earlier["result"]["outputs"]["rows"])
    return tuple(training_rows(rows, settings.weight, settings.seed))


def evaluation_stage(stage: Stage) -> bool:
    """Whether a stage evaluates a model (held-out prompts or a side of the gate): what evaluation.timeoutMs bounds."""
    return bool(stage.evaluates or gate_side(stage))


def run_stage_call(call: StageCall) -> StageOutcome:
    """Run one stage as a subprocess in the engine environment."""
    run_call, stage = call.run_call, call.stage
    run, reporter, observers = run_call.run, run_call.reporter, run_call.observers
    stage_dir = make_private_dir(run.stage_dir(stage.name))
    make_private_dir(run.logs)
    result_path = run.result_path(stage.name)
    result_path.unlink(missing_ok=True)
    request_path = stage_dir / runlayout.REQUEST
    write_json_atomic(request_path, stage_request(call, stage_dir, result_path).to_json())
    reporter.stage_started(stage.name, stage.description)

    def on_event(event: dict[str, Any]) -> None:
        reporter.event(stage.name, event)
        observers.event(str(run.path), stage.name, event)  # an observer never stops a run (tt_host.runs.observers)

    on_event({"type": "stage_start", "stage": stage.name, "resume": call.resume})
    log = run.logs / f"{stage.name}.log"
    outcome = run_stage(call.env.python, stage.arguments(run_call.loaded.spec), request_path, run.path, log,
                        on_event, keep_fds=run.lock_fds() + envs.held_fds(call.env.path),
                        on_started=lambda pid: run.note_stage(stage.name, pid),
                        time_limit=run_call.loaded.eval_timeout if evaluation_stage(stage) else None,
                        warm=run_call.loaded.engine.stage_server)
    result = run.read_result(stage.name) if outcome.exit_code == EXIT_OK else None
    code, err = outcome.exit_code, outcome.last_error
    if code == EXIT_OK and (result is None or result.get("status") != COMPLETED):
        code, err = EXIT_FAILED, f"stage {stage.name} exited 0 without a completed result at {result_path}"
    if code not in (EXIT_OK, EXIT_INTERRUPTED) and not err:
        failed = run.read_result(stage.name) or {}
        last = f": {outcome.tail[-1]}" if outcome.tail else ""
        err = failed.get("error") or f"stage {stage.name} exited with code {outcome.exit_code}{last}; see {log}"
    if outcome.interrupted and code != EXIT_OK:
        code = EXIT_INTERRUPTED
        err = err or "interrupted"
    state = {EXIT_OK: COMPLETED, EXIT_INTERRUPTED: INTERRUPTED}.get(code, FAILED)
    on_event({"type": "stage_end", "stage": stage.name, "state": state, "exit_code": code})
    reporter.stage_finished(stage.name, state, outcome.seconds)
    return StageOutcome(dict(result or {}), code, err, outcome.seconds)
