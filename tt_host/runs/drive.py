"""Driving a run, top to bottom: lock, plan, environment, stages, finish.

Order of work, so that invalid input never creates anything:
1. the spec is already validated and compiled (tt_host.spec.loading);
2. the run directory is locked (before anything else is decided, so two `tt run --resume R` never both
   start R: tt_host.runs.opening) and, when it exists, checked (tt_host.runs.plan): a finished (or
   partly done) stage that may not be replaced whose inputs changed is refused, naming what changed,
   before any file is written;
3. the engine environment is made ready, then the run's state (run.json, tt_host.runs.state) and its
   record (`RunCall`: the spec, the folder, observers, what they are told), complete before the first stage;
4. stages run in order (tt_host.runs.invoke); a verified completed stage with the same fingerprint is
   reused; a replaceable one whose inputs changed runs again; results are scored, artifacts registered
   at once (tt_host.runs.results);
5. whatever the outcome, its ending (tt_host.reports.ending.Ending: facts, never a report key) is handed to the
   reports wing, which decides and writes report.json / report.md.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from tt_host import __version__
from tt_host.engines import envs
from tt_host.engines.runner import grace_seconds, ignore_further_stops
from tt_host.evaluation import baseline_cache
from tt_host.fsutil import DiskFull
from tt_host.models.registry import VerifyError
from tt_host.plugins import Plugins
from tt_host.reports.ending import COMPLETED, FAILED, STOPPED, Ending, Tally
from tt_host.reports.report import build_report, write_report
from tt_host.runs import index, state as states
from tt_host.runs.diskfull import out_of_disk
from tt_host.runs.fingerprint import PlannedStage, chain
from tt_host.runs.host_stage import run_host_stage
from tt_host.runs.invoke import RunCall, StageCall, StageOutcome, run_stage_call, stage_request
from tt_host.runs.observers import Observers
from tt_host.runs.opening import RunRefused, check_run_path, claim_new_run_dir, open_run
from tt_host.runs.plan import (Decision, decide, default_run_dir, kept_split, new_run_id, refusal, same_engine,
                               spec_digest)
from tt_host.runs.progress import QuietReporter, build_display, problem_sink
from tt_host.runs.results import take_result
from tt_host.runs.runinfo import RunInfo, enabled_observers
from tt_host.runs.state import RunState, StageRecord
from tt_host.runs.store import RunDir, now
from tt_host.spec.benchmarks import task_code_note
from tt_host.spec.general import GeneralSet
from tt_host.spec.loading import LoadedSpec
from tt_host.spec.rendezvous import launch_errors
from tt_host.synthesis.stage import is_host_stage, key_problem, teacher_problem
from tt_stagekit.contract import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_INVALID, EXIT_OK

__all__ = ["RunOutcome", "RunRefused", "check_run_path", "execute"]


@dataclass
class RunOutcome:
    exit_code: int
    run_dir: Path
    status: str
    report: dict[str, Any] = field(default_factory=dict)
    error: Optional[str] = None


def execute(
    loaded: LoadedSpec,
    plugins: Plugins,
    run_dir: Optional[Path] = None,
    device: Optional[str] = None,
    reporter: QuietReporter = QuietReporter(),
    only: Optional[frozenset[str]] = None,
    wait: bool = True,
    on_finish: Optional[Callable[[RunOutcome], None]] = None,
) -> RunOutcome:
    """Run (or resume) a validated spec; `only`: the stages a pipeline document runs (tt_host.runs.plan);
    `on_finish`: told the outcome while the run is still locked (a pipeline's evaluation files);
    `wait`: a resume waits (up to the stage grace period) for the stages of a `tt` that died to exit.
    Raises RunRefused (exit 2) before changing anything."""
    assert loaded.valid and loaded.engine and loaded.spec and loaded.compiled
    if run_dir is not None:
        check_run_path(run_dir)
    digest = spec_digest(loaded)
    problems = problem_sink(reporter)
    if message := key_problem(loaded.spec) or "; ".join(launch_errors(loaded.spec)):
        raise RunRefused(message)  # launch_errors: the rendezvous read from Slurm / the environment
    if run_dir is None:
        run_dir = claim_new_run_dir(default_run_dir(loaded.path, new_run_id(digest)))
        made = True
    else:
        made = False
    run = RunDir(run_dir)
    with open_run(run, grace_seconds() if wait else 0.0, problems, made=made) as existed:
        state = run.load() if existed else None
        if state is not None:
            same_engine(state, loaded)
            loaded = kept_split(loaded, state, run)
        plan = chain(loaded.engine, loaded.spec, loaded.compiled)
        decisions = decide(plan, state, run if existed else None, loaded.spec, only)
        if message := refusal(decisions) or teacher_problem(loaded.spec, decisions):
            raise RunRefused(message)
        if note := task_code_note(loaded.spec):
            problems(note)
        outcome = _drive(_Start(loaded, plugins, run, device, reporter, problems, digest, existed), plan, decisions)
        if on_finish is not None:
            on_finish(outcome)
        return outcome


@dataclass(frozen=True)
class _Start:
    """What `execute` hands `_drive`: the locked run before its environment and state exist."""

    loaded: LoadedSpec
    plugins: Plugins
    run: RunDir
    device: Optional[str]
    reporter: QuietReporter
    problems: Callable[[str], None]
    digest: str
    existed: bool


class _TermAsInterrupt:
    """While no stage runs, SIGTERM behaves like Ctrl-C (KeyboardInterrupt)."""

    def __enter__(self) -> "_TermAsInterrupt":
        self.previous, self.stopped = signal.signal(signal.SIGTERM, self._raise), False
        return self

    def _raise(self, signum: int, frame: object) -> None:
        self.stopped = True
        raise KeyboardInterrupt

    def __exit__(self, *exc: object) -> None:
        if self.stopped:  # later copies change nothing up to the exit (exit status 130)
            ignore_further_stops()
        else:
            signal.signal(signal.SIGTERM, self.previous)


def _drive(start: _Start, plan: list[PlannedStage], decisions: list[Decision]) -> RunOutcome:
    """Make the environment ready, open the run's state, build the run's record, run or reuse each stage,
    write the report."""
    with _TermAsInterrupt():
        try:
            with build_display(start.reporter, f"preparing the {start.loaded.engine.name} environment") as show:
                env = envs.ensure_env(start.loaded.engine, log=lambda line: None, progress=show)
            if env.built:
                start.reporter.message(f"built environment {env.path.name} in {env.seconds:.0f}s")
        except KeyboardInterrupt:
            return RunOutcome(EXIT_INTERRUPTED, start.run.path, states.RUN_INTERRUPTED,
                              error="interrupted while building the environment")
        except envs.EnvBuildError as exc:
            return RunOutcome(EXIT_FAILED, start.run.path, states.RUN_FAILED, error=str(exc))

    try:
        start.run.reserve()  # room for run.json and the report should the disk fill (tt_host.runs.diskfull)
        state = _open_state(start, env, plan)
    except DiskFull as exc:
        return RunOutcome(EXIT_FAILED, start.run.path, states.RUN_FAILED,
                          error=out_of_disk(start.run, None, exc, start.loaded.path,
                                            start.existed or start.run.exists()))
    _index(start, state)
    observers = Observers(start.plugins, start.problems)
    call = RunCall(start.loaded, start.plugins, start.run, start.device, start.reporter, start.digest, start.existed,
                   observers, _run_info(start, state))
    for name in observers.unknown(call.info.observers):
        installed = ", ".join(observers.names) or "none"
        start.problems(f"observers.{name}: no installed observer plugin is named {name!r} or "
                       f"'observer-{name}' (installed: {installed}); check the spelling or "
                       "`tt engines install` it")
    observers.run_start(call.info)
    try:
        return _stages(call, env, state, plan, decisions)
    except DiskFull as exc:  # a write of the host found no space: one clear error, run.json failed
        return RunOutcome(EXIT_FAILED, call.run.path, states.RUN_FAILED,
                          error=out_of_disk(call.run, state, exc, call.loaded.path, True))
    finally:
        observers.close()


def _open_state(start: _Start, env: envs.EnvInfo, plan: list[PlannedStage]) -> RunState:
    """The run's state (run.json): created for a new run, brought up to date for a resumed one."""
    engine, spec, compiled, run = start.loaded.engine, start.loaded.spec, start.loaded.compiled, start.run
    if not start.existed:
        state = RunState(
            id=run.path.name, engine=engine.name, engine_distribution=engine.distribution,
            engine_version=engine.distribution_version, host_version=__version__, spec_name=spec.name,
            spec_path=str(start.loaded.path), spec_sha256=start.digest,
            system_message_sha256=compiled.system_message_sha256, split=compiled.split.to_json(), env_key=env.key,
            created_at=now(),
            stages={planned.stage.name: StageRecord() for planned in plan},
            extra={"spec_id": start.loaded.spec_id} if start.loaded.spec_id else {},
        )
        if start.loaded.overrides:
            state.extra["overrides"] = list(start.loaded.overrides)
        run.create(state, spec.model_dump(mode="json"))
        return state
    state = run.load_state()
    if state.spec_sha256 != start.digest:
        run.write_spec(spec.model_dump(mode="json"))
        state.spec_sha256 = start.digest
    state.extra.pop("overrides", None)  # the ones this command gave, as spec.json holds their result
    if start.loaded.overrides:
        state.extra["overrides"] = list(start.loaded.overrides)
    state.status = states.RUN_RUNNING
    state.split = compiled.split.to_json()  # the started split, with any new examples' sides added
    state.env_key = env.key
    for planned in plan:
        state.stage(planned.stage.name)
    run.save(state)
    return state


def _index(start: _Start, state: RunState) -> None:
    """Note the run in $TT_HOME's run index (tt_host.runs.index); a failure to is said, never fatal."""
    try:
        index.record(start.run.path, state.id, str(start.loaded.path), start.loaded.engine.name, state.created_at)
    except OSError as exc:
        start.problems(f"could not note the run in the run index ({index.index_dir()}): {exc}; "
                       "`tt runs list` finds it only from its own folder")


def _run_info(start: _Start, state: RunState) -> RunInfo:
    loaded = start.loaded
    return RunInfo(run_dir=start.run.path, run_id=state.id, spec_name=loaded.spec.name, engine=loaded.engine.name,
                   spec=loaded.spec.model_dump(mode="json"), system_message=loaded.compiled.system_message,
                   system_message_sha256=loaded.compiled.system_message_sha256, resumed=start.existed,
                   observers=enabled_observers(loaded.spec.observers))


ACTION_DONE = {"rerun": "ran again", "resume": "resumed"}  # the report's word for what a stage did ("ran" otherwise)


def _stages(call: RunCall, env: envs.EnvInfo, state: RunState, plan: list[PlannedStage],
            decisions: list[Decision]) -> RunOutcome:
    """Run or reuse each stage in order, then write the report."""
    spec = call.loaded.spec
    policy = spec.evaluation.general_regression if spec.evaluation else None
    general = policy.load() if policy else None
    tally = Tally()
    exit_code, error = EXIT_OK, None
    for (stage, inputs, fingerprint), decision in zip(plan, decisions):
        record = state.stages[stage.name]
        if decision.action == "leave":  # no step of the pipeline document runs it: its record stays as it is
            tally.actions[stage.name] = "left"
            continue
        if decision.action == "skip":
            record.skipped(fingerprint, inputs)
            tally.actions[stage.name] = "skipped"
            call.run.save(state)
            continue
        if decision.action == "reuse":
            result = call.run.read_result(stage.name) or {}
            tally.actions[stage.name] = "reused"
            call.reporter.message(f"{stage.name}: completed earlier with the same inputs, verified, reused", "dim")
        else:
            if decision.action == "rerun":
                call.reporter.message(f"{stage.name}: {decision.reason}", "yellow")
                call.run.remove_stage(stage.name)
            tally.actions[stage.name] = ACTION_DONE.get(decision.action, "ran")
            record.started(fingerprint, inputs, now())
            call.run.save(state)
            runner = run_host_stage if is_host_stage(stage) else run_stage_call
            stage_call = StageCall(call, env, stage, fingerprint, decision.resume, dict(tally.completed), general)
            outcome = _cached_or_run(stage_call, runner, inputs, record, tally, state.id)
            result, code = outcome.result, outcome.exit_code
            record.ended(now(), code, round(outcome.seconds, 3))
            if code == EXIT_OK:
                record.state, record.result_sha256 = states.COMPLETED, call.run.result_digest(stage.name)
            else:
                record.failed(states.INTERRUPTED if code == EXIT_INTERRUPTED else states.FAILED, outcome.error)
                call.run.save(state)
                exit_code = code if code in (EXIT_INTERRUPTED, EXIT_INVALID) else EXIT_FAILED
                error = outcome.error
                break
        try:
            take_result(call, state, stage, result, tally, general)
        except (ValueError, VerifyError, KeyError, OSError) as exc:
            record.failed(states.FAILED, str(exc))
            exit_code, error = EXIT_FAILED, str(exc)
            call.run.save(state)
            break
        call.run.save(state)
    return _finish(call, state, tally, exit_code, error, policy, general)


def _cached_or_run(stage_call: StageCall, runner, inputs: dict[str, Any], record: StageRecord, tally: Tally,
                   run_id: str) -> StageOutcome:
    """The stage's outcome: taken from the cross-run baseline cache when it may be (tt_host.evaluation.baseline_cache,
    no stage process started), else from running it (and then kept in the cache)."""
    run, stage, loaded = stage_call.run_call.run, stage_call.stage, stage_call.run_call.loaded
    key = hint = None
    if baseline_cache.applies(stage, stage_call.resume):
        request = stage_request(stage_call, run.stage_dir(stage.name), run.result_path(stage.name)).to_json()
        key = baseline_cache.cache_key(loaded.engine, stage_call.env.key, stage, loaded.spec, inputs, request, run.path)
        hint = baseline_cache.hint_key(loaded.engine, stage_call.env.key, stage, loaded.spec, inputs, request)
        cached = baseline_cache.lookup(key, run.stage_dir(stage.name), run.result_path(stage.name), request)
        if cached is not None:
            record.extra["reused_from"] = cached.from_run
            tally.actions[stage.name] = f"reused from run {cached.from_run}"
            tally.notes.append(f"baseline reused from run {cached.from_run} (stage {stage.name}; the same base "
                               "model, prompts, generation settings and engine environment)")
            stage_call.run_call.reporter.message(f"{stage.name}: reused from run {cached.from_run}", "dim")
            return StageOutcome(cached.result, EXIT_OK, None, 0.0)
    outcome = runner(stage_call)
    if key and outcome.exit_code == EXIT_OK:
        baseline_cache.store(key, run.stage_dir(stage.name), run.path, stage.name, run_id, hint)
    return outcome


def _finish(call: RunCall, state: RunState, tally: Tally, exit_code: int, error: Optional[str], policy,
            general: Optional[GeneralSet]) -> RunOutcome:
    """Record the run's end state, then hand its ending to the reports wing (report.json / report.md)."""
    run = call.run
    state.status = {EXIT_OK: states.RUN_COMPLETED, EXIT_INTERRUPTED: states.RUN_INTERRUPTED}.get(
        exit_code, states.RUN_FAILED)
    if error:
        state.error = error
    run.save(state)
    evaluation = call.loaded.spec.evaluation
    report = build_report(Ending(
        how={EXIT_OK: COMPLETED, EXIT_INTERRUPTED: STOPPED}.get(exit_code, FAILED), state=state.to_json(),
        spec_path=call.loaded.path, run_path=run.path, tally=tally, error=error,
        eval_rows=call.loaded.compiled.eval_rows, graders=call.loaded.graders, general_policy=policy,
        general=general, benchmarks=evaluation.benchmarks if evaluation else None))
    if "general_regression" in report:
        call.observers.event(str(run.path), "gate", {"type": "gate", **report["general_regression"]})
    write_report(run.path, report, tally.series)
    call.observers.run_end(call.info, report)
    return RunOutcome(exit_code, run.path, state.status, report, error)
