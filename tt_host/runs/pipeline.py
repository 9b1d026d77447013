"""Driving a run: decide what to skip, run each stage in the engine environment, score, register, report.

Order of work, so that invalid input never creates anything:
1. the spec is already validated and compiled (tt_host.spec.loading);
2. the run directory is locked (before anything else is decided, so two `tt run --resume R` never both
   start R) and, when it exists, checked (tt_host.runs.plan): a
   finished (or partly done) stage that may not be replaced whose inputs
   changed is refused, naming what changed, before any file is written;
3. the engine environment is made ready;
4. stages run in order; a verified completed stage with the same fingerprint
   is reused; a replaceable one whose inputs changed runs again; results are scored, artifacts registered at once;
5. report.json / report.md are written whatever the outcome.
"""

from __future__ import annotations

import hashlib
import os
import signal
import stat
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Optional

from tt_host import __version__
from tt_host.engines import envs
from tt_host.runs import gate
from tt_host.runs.progress import QuietReporter
from tt_host.engine import Stage, gate_side
from tt_host.fsutil import make_private_dir, remove_tree, write_json_atomic
from tt_host.models.registry import VerifyError, register
from tt_host.runs.observers import Observers
from tt_host.plugins import Plugins
from tt_host.runs.report import build_report, write_report
from tt_host.runs.runinfo import RunInfo, enabled_observers
from tt_host.engines.runner import EXIT_INTERRUPTED, run_stage
from tt_host.runs.plan import Decision, decide, refusal
from tt_host.runs.fingerprint import canonical, chain
from tt_host.runs.store import RunDir, now
from tt_host.runs.scoring import read_predictions, score
from tt_host.spec.general import GeneralSet
from tt_host.spec.loading import LoadedSpec
from tt_stagekit.userinput import os_reason, special_kind

EXIT_OK, EXIT_FAILED, EXIT_INVALID = 0, 1, 2


class RunRefused(RuntimeError):
    """The run cannot start or resume as asked (exit 2); nothing was changed."""


@dataclass
class RunOutcome:
    exit_code: int
    run_dir: Path
    status: str
    report: dict[str, Any] = field(default_factory=dict)
    error: Optional[str] = None


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
    observers: Optional[Observers] = None  # set once the run's state exists (_drive)
    info: Optional[RunInfo] = None  # what observers are told about the run


@dataclass(frozen=True)
class StageCall:
    """One stage invocation of a run: what `_run_one` turns into the stage's request.json and subprocess."""

    call: RunCall
    env: envs.EnvInfo
    stage: Stage
    fingerprint: str
    resume: bool
    completed: Mapping[str, Any]  # earlier completed stages: {name: {"dir", "result"}}
    general: Optional[GeneralSet]


@dataclass
class _Tally:
    """What the finished stages of a run add up to, for the report."""

    metrics: dict[str, Any] = field(default_factory=dict)
    series: dict[str, list] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    models: list[dict[str, Any]] = field(default_factory=list)
    actions: dict[str, str] = field(default_factory=dict)
    completed: dict[str, Any] = field(default_factory=dict)
    general_answers: dict[str, dict[str, str]] = field(default_factory=dict)


def new_run_id(spec_sha: str) -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + f"-{spec_sha[:8]}"


def default_run_dir(spec_path: Path, run_id: str) -> Path:
    return spec_path.parent / ".tuned-tensor" / "runs" / run_id


def spec_digest(loaded: LoadedSpec) -> str:
    return hashlib.sha256(canonical(loaded.spec.model_dump(mode="json")).encode()).hexdigest()


class _TermAsInterrupt:
    """While no stage runs, SIGTERM behaves like Ctrl-C (KeyboardInterrupt)."""

    def __enter__(self) -> "_TermAsInterrupt":
        self.previous = signal.signal(signal.SIGTERM, self._raise)
        return self

    @staticmethod
    def _raise(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    def __exit__(self, *exc: object) -> None:
        signal.signal(signal.SIGTERM, self.previous)


def _same_engine(state: dict[str, Any], loaded: LoadedSpec) -> None:
    if state.get("engine") != loaded.engine.name:
        raise RunRefused(
            f"run directory was made by engine {state.get('engine')!r}, the spec asks for {loaded.engine.name!r}; "
            "use a new run directory"
        )


def _check_resume(state: dict[str, Any], loaded: LoadedSpec, run: RunDir, plan: list) -> list[Decision]:
    _same_engine(state, loaded)
    decisions = decide(plan, state, run, loaded.spec)
    if message := refusal(decisions):
        raise RunRefused(message)
    return decisions


def check_run_path(path: Path) -> None:
    """Refuse at once a `--resume` that can never be a run directory (RunRefused, exit 2, nothing made):
    a file, FIFO or device, a dangling symbolic link (following it would create its target), a parent
    that is a file, a name the filesystem cannot hold."""
    try:
        mode = os.lstat(path).st_mode
        if stat.S_ISLNK(mode):
            if not os.path.exists(path):
                raise RunRefused(f"--resume {path} is a symbolic link to {os.readlink(path)}, which does not "
                                 "exist; pass a real folder (new or a run directory)")
            mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise RunRefused(f"--resume {path}: {os_reason(exc)}") from None
    if not stat.S_ISDIR(mode):
        raise RunRefused(f"--resume {path} is {special_kind(mode)}, not a run directory; pass a new folder or "
                         "an existing run directory")


def preview(loaded: LoadedSpec, run_dir: Optional[Path]) -> tuple[Path, bool, list[Decision]]:
    """What `execute` would do, without locking or writing anything: (run dir, exists, decisions).
    Raises RunRefused for a folder that is not a run directory or one made by another engine."""
    plan = chain(loaded.engine, loaded.spec, loaded.compiled)
    if run_dir is not None:
        check_run_path(run_dir)
    if run_dir is None:
        return default_run_dir(loaded.path, new_run_id(spec_digest(loaded))), False, decide(plan, None, None, loaded.spec)
    run = RunDir(run_dir)
    if not run.exists():
        if run.path.exists() and not _fresh(run.path):
            raise RunRefused(f"{run.path} exists and is not a tt run directory; pass an empty or new folder")
        return run.path, False, decide(plan, None, None, loaded.spec)
    state = run.load()
    _same_engine(state, loaded)
    return run.path, True, decide(plan, state, run, loaded.spec)


def execute(
    loaded: LoadedSpec,
    plugins: Plugins,
    run_dir: Optional[Path] = None,
    device: Optional[str] = None,
    reporter: QuietReporter = QuietReporter(),
) -> RunOutcome:
    """Run (or resume) a validated spec. Raises RunRefused (exit 2) before changing anything."""
    assert loaded.valid and loaded.engine and loaded.spec and loaded.compiled
    if run_dir is not None:
        check_run_path(run_dir)
    engine, spec, compiled = loaded.engine, loaded.spec, loaded.compiled
    digest = spec_digest(loaded)
    plan = chain(engine, spec, compiled)
    if run_dir is None:
        run_dir = default_run_dir(loaded.path, new_run_id(digest))
    run = RunDir(run_dir)
    if run.path.exists() and not run.exists() and not _fresh(run.path):
        raise RunRefused(f"{run.path} exists and is not a tt run directory; pass an empty or new folder")
    made = not run.path.exists()
    # The lock comes first: whether the run exists is decided under it, so a second `tt run --resume R`
    # started meanwhile is refused at once instead of re-creating R once this one has finished.
    run.lock()  # refuses at once when another process holds it
    try:
        existed = run.exists()
        decisions = decide(plan, None, None, spec)
        if existed:
            state = run.load()
            decisions = _check_resume(state, loaded, run, plan)
        elif not _fresh(run.path):
            raise RunRefused(f"{run.path} exists and is not a tt run directory; pass an empty or new folder")
        return _drive(RunCall(loaded, plugins, run, device, reporter, digest, existed), plan, decisions)
    finally:
        run.unlock()
        if made and not run.exists():  # nothing was run: leave no folder behind
            (run.path / ".tt-run.lock").unlink(missing_ok=True)
            try:
                run.path.rmdir()
            except OSError:
                pass


def _fresh(path: Path) -> bool:
    """An empty folder, or one holding only a run lock (a run being started right now)."""
    return path.is_dir() and all(entry.name == ".tt-run.lock" for entry in path.iterdir())


def _drive(call: RunCall, plan: list, decisions: list[Decision]) -> RunOutcome:
    """Make the environment ready, open the run's state, run or reuse each stage, write the report."""
    with _TermAsInterrupt():
        try:
            call.reporter.message(f"preparing the {call.loaded.engine.name} environment…")
            env = envs.ensure_env(call.loaded.engine, log=lambda line: None)
            if env.built:
                call.reporter.message(f"built environment {env.path.name} in {env.seconds:.0f}s")
        except KeyboardInterrupt:
            return RunOutcome(EXIT_INTERRUPTED, call.run.path, "interrupted",
                              error="interrupted while building the environment")
        except envs.EnvBuildError as exc:
            return RunOutcome(EXIT_FAILED, call.run.path, "failed", error=str(exc))

    state = _open_state(call, env, plan)
    call = replace(call, observers=Observers(call.plugins, _observer_problems(call.reporter)),
                   info=_run_info(call, state))
    for name in call.observers.unknown(call.info.observers):
        installed = ", ".join(call.observers.names) or "none"
        _observer_problems(call.reporter)(f"observers.{name}: no installed observer plugin is named {name!r} or "
                                          f"'observer-{name}' (installed: {installed}); check the spelling or "
                                          "`tt engines install` it")
    call.observers.run_start(call.info)
    try:
        return _stages(call, env, state, plan, decisions)
    finally:
        call.observers.close()


def _observer_problems(reporter: QuietReporter):
    """Where an observer's problem is shown: the progress display, or stderr when there is none (--json)."""
    if type(reporter) is QuietReporter:
        return lambda text: print(f"tt: {text}", file=sys.stderr, flush=True)
    return lambda text: reporter.message(text, "yellow")


def _run_info(call: RunCall, state: dict[str, Any]) -> RunInfo:
    loaded = call.loaded
    return RunInfo(run_dir=call.run.path, run_id=state["id"], spec_name=loaded.spec.name, engine=loaded.engine.name,
                   spec=loaded.spec.model_dump(mode="json"), system_message=loaded.compiled.system_message,
                   system_message_sha256=loaded.compiled.system_message_sha256, resumed=call.existed,
                   observers=enabled_observers(loaded.spec.observers))


def _stages(call: RunCall, env: envs.EnvInfo, state: dict[str, Any], plan: list,
            decisions: list[Decision]) -> RunOutcome:
    """Run or reuse each stage in order, then write the report."""
    spec = call.loaded.spec
    policy = spec.evaluation.general_regression if spec.evaluation else None
    general = policy.load() if policy else None
    tally = _Tally()
    exit_code, error = EXIT_OK, None
    for (stage, inputs, fingerprint), decision in zip(plan, decisions):
        record = state["stages"][stage.name]
        if decision.action == "skip":
            record.update(state="skipped", fingerprint=fingerprint, inputs=inputs)
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
                remove_tree(call.run.stage_dir(stage.name))
            tally.actions[stage.name] = {"rerun": "ran again", "resume": "resumed"}.get(decision.action, "ran")
            record.update(state="running", fingerprint=fingerprint, inputs=inputs, started_at=now(),
                          exit_code=None, error=None)
            call.run.save(state)
            result, code, err = _run_one(StageCall(call, env, stage, fingerprint, decision.resume,
                                                   dict(tally.completed), general))
            record.update(finished_at=now(), exit_code=code, seconds=round(result.pop("_seconds", 0.0), 3))
            if code == EXIT_OK:
                record.update(state="completed", result_sha256=call.run.result_digest(stage.name))
            else:
                record.update(state="interrupted" if code == EXIT_INTERRUPTED else "failed", error=err)
                call.run.save(state)
                exit_code = code if code in (EXIT_INTERRUPTED, EXIT_INVALID) else EXIT_FAILED
                error = err
                break
        try:
            _take_result(call, state, stage, result, tally, general)
        except (ValueError, VerifyError, KeyError, OSError) as exc:
            record.update(state="failed", error=str(exc))
            exit_code, error = EXIT_FAILED, str(exc)
            call.run.save(state)
            break
        call.run.save(state)
    return _finish(call, state, tally, exit_code, error, policy, general)


def _open_state(call: RunCall, env: envs.EnvInfo, plan: list) -> dict[str, Any]:
    """The run's state (run.json): created for a new run, brought up to date for a resumed one."""
    engine, spec, compiled, run = call.loaded.engine, call.loaded.spec, call.loaded.compiled, call.run
    if not call.existed:
        state = {
            "format": 1, "id": run.path.name, "engine": engine.name,
            "engine_distribution": engine.distribution, "engine_version": engine.distribution_version,
            "host_version": __version__, "spec_name": spec.name, "spec_path": str(call.loaded.path),
            "spec_sha256": call.digest, "system_message_sha256": compiled.system_message_sha256,
            "env_key": env.key, "created_at": now(), "status": "running",
            "stages": {stage.name: {"state": "pending"} for stage, _, _ in plan},
        }
        run.create(state, spec.model_dump(mode="json"))
        return state
    state = run.load()
    if state.get("spec_sha256") != call.digest:
        write_json_atomic(run.spec_json, spec.model_dump(mode="json"))
        state["spec_sha256"] = call.digest
    state["status"] = "running"
    state["env_key"] = env.key
    for stage, _, _ in plan:
        state["stages"].setdefault(stage.name, {"state": "pending"})
    run.save(state)
    return state


def _take_result(call: RunCall, state: dict[str, Any], stage: Stage, result: dict[str, Any], tally: _Tally,
                 general: Optional[GeneralSet]) -> None:
    """Add a completed stage's result to the tally: metrics, series, notes, scores, registered models."""
    run = call.run
    tally.completed[stage.name] = {"dir": str(run.stage_dir(stage.name)), "result": result}
    tally.metrics.update(result.get("metrics") or {})
    tally.series.update(result.get("series") or {})
    tally.notes += [n for n in result.get("notes") or [] if isinstance(n, str)]
    scored: dict[str, Any] = {}
    if stage.evaluates and result.get("predictions"):
        predictions = read_predictions(run.stage_dir(stage.name) / result["predictions"])
        scored.update(score(predictions, call.loaded.compiled.references(), stage.evaluates))
        scored["eval.count"] = scored[f"{stage.evaluates}.count"]
    if general is not None and gate_side(stage) and result.get("general_predictions"):
        answers = read_predictions(run.stage_dir(stage.name) / result["general_predictions"])
        tally.general_answers[gate_side(stage)] = answers
        scored.update(score(answers, general.references(), f"{gate_side(stage)}.general"))
    tally.metrics.update(scored)
    if scored:
        call.observers.event(str(run.path), stage.name, {"type": "scores", "stage": stage.name, "values": scored})
    for artifact in result.get("artifacts") or []:
        path = Path(artifact["path"])
        path = path if path.is_absolute() else run.path / path
        tally.models.append(register(path, run_id=state["id"], run_dir=run.path, spec_name=call.loaded.spec.name,
                                     engine=call.loaded.engine.name, kind=artifact.get("kind", "model")))
        call.reporter.message(f"registered model {tally.models[-1]['id']}", "green")


def _finish(call: RunCall, state: dict[str, Any], tally: _Tally, exit_code: int, error: Optional[str], policy,
            general: Optional[GeneralSet]) -> RunOutcome:
    """Record the run's end state and write report.json / report.md."""
    run = call.run
    state["status"] = {EXIT_OK: "completed", EXIT_INTERRUPTED: "interrupted"}.get(exit_code, "failed")
    if error:
        state["error"] = error
    run.save(state)
    report = build_report(state, tally.metrics, tally.series, tally.notes, tally.models, tally.actions)
    if policy is not None:
        report["general_regression"] = gate.evaluate(policy, general, tally.general_answers)
        call.observers.event(str(run.path), "gate", {"type": "gate", **report["general_regression"]})
    if error:
        report["error"] = error
    if state["status"] == "interrupted":
        report["resume"] = f"tt run {call.loaded.path} --resume {run.path}"
    write_report(run.path, report, tally.series)
    call.observers.run_end(call.info, report)
    return RunOutcome(exit_code, run.path, state["status"], report, error)


def _request(call: StageCall, stage_dir: Path, result_path: Path) -> dict[str, Any]:
    """The stage's request.json (docs/protocol.md)."""
    loaded, stage, general = call.call.loaded, call.stage, call.general
    spec_data = loaded.spec.model_dump(mode="json")
    return {
        "protocol": 1, "engine": loaded.engine.name, "stage": stage.name,
        "run_dir": str(call.call.run.path), "stage_dir": str(stage_dir), "result_path": str(result_path),
        "spec": spec_data, "spec_dir": str(loaded.path.parent),
        "system_message": loaded.compiled.system_message,
        "system_message_sha256": loaded.compiled.system_message_sha256,
        "train_rows": loaded.compiled.train_rows if stage.gets_train_rows else [],
        "eval_prompts": loaded.compiled.eval_prompts() if stage.evaluates else [],
        "general_prompts": general.prompts() if general is not None and gate_side(stage) else [],
        "device": call.call.device or loaded.engine.spec_device(loaded.spec) or "auto",
        "resume": call.resume, "fingerprint": call.fingerprint, "stages": dict(call.completed),
    }


def _run_one(call: StageCall) -> tuple[dict[str, Any], int, Optional[str]]:
    """Run one stage as a subprocess in the engine environment: (its result, exit code, error)."""
    run, stage, reporter = call.call.run, call.stage, call.call.reporter
    stage_dir = make_private_dir(run.stage_dir(stage.name))
    make_private_dir(run.logs)
    result_path = run.result_path(stage.name)
    result_path.unlink(missing_ok=True)
    request_path = stage_dir / "request.json"
    write_json_atomic(request_path, _request(call, stage_dir, result_path))
    reporter.stage_started(stage.name, stage.description)
    observers = call.call.observers

    def on_event(event: dict[str, Any]) -> None:
        reporter.event(stage.name, event)
        observers.event(str(run.path), stage.name, event)  # an observer never stops a run (tt_host.runs.observers)

    on_event({"type": "stage_start", "stage": stage.name, "resume": call.resume})
    outcome = run_stage(call.env.python, stage.arguments(call.call.loaded.spec), request_path, run.path,
                        run.logs / f"{stage.name}.log", on_event, keep_fds=run.lock_fds() + envs.held_fds(call.env.path),
                        on_started=lambda pid: run.note_stage(stage.name, pid))
    result = run.read_result(stage.name) if outcome.exit_code == EXIT_OK else None
    code, err = outcome.exit_code, outcome.last_error
    if code == EXIT_OK and (result is None or result.get("status") != "completed"):
        code, err = EXIT_FAILED, f"stage {stage.name} exited 0 without a completed result at {result_path}"
    if code not in (EXIT_OK, EXIT_INTERRUPTED) and not err:
        failed = run.read_result(stage.name) or {}
        last = f": {outcome.tail[-1]}" if outcome.tail else ""
        err = failed.get("error") or (f"stage {stage.name} exited with code {outcome.exit_code}{last}; "
                                      f"see {run.logs / (stage.name + '.log')}")
    if outcome.interrupted and code != EXIT_OK:
        code = EXIT_INTERRUPTED
        err = err or "interrupted"
    state = {EXIT_OK: "completed", EXIT_INTERRUPTED: "interrupted"}.get(code, "failed")
    on_event({"type": "stage_end", "stage": stage.name, "state": state, "exit_code": code})
    reporter.stage_finished(stage.name, state, outcome.seconds)
    result = dict(result or {})
    result["_seconds"] = outcome.seconds
    return result, code, err
