"""What a run (or a resume) would do with each stage, decided from run.json alone, writing nothing.

For every stage of the plan one `Decision`:

- `run`: not run yet (or skipped, pending, or failed with other inputs);
- `resume`: started earlier with the same inputs (interrupted, left running or
  failed): it continues from its own saved state;
- `reuse`: completed with the same inputs and its result file intact: skipped;
- `rerun`: a replaceable stage that finished or started with other inputs: its
  folder is deleted and it runs again from scratch;
- `skip`: the spec turns the stage off;
- `refuse`: a stage that may not be replaced (pretraining) finished or started
  with other inputs: the run needs a new run directory;
- `leave`: a pipeline document's steps do not include the stage (`only`), and it
  has not completed with the same inputs: it is left as it is (one that has is
  reused, so the stages after it can read it).

A stage that trains on the synthetic rows (its inputs hold the `synthesize` stage's fingerprint) is never reused
or resumed unless `synthesize` itself is reused: when `synthesize` runs now (a folder where an older
`tt pipeline run` trained without it, or its result changed), that stage and every stage reading it run again
(`rerun`), or are refused when they may not be replaced; a pipeline that runs it but leaves `synthesize` is
refused (`unmet_needs`).

`tt run` acts on these decisions (refusing before anything is written) and
`tt run --dry-run` prints them (`preview`). Below them, what the run is before it is locked: its folder's
default name, its engine and the split it keeps (`kept_split`).
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Optional

from tt_host.canonical import canonical
from tt_host import runlayout
from tt_host.runs.fingerprint import OUTSIDE_CHAIN_KEYS, SYNTHESIS_KEY, PlannedStage, chain, changed_keys, needs
from tt_host.runs.opening import RunRefused, check_run_path, refuse_foreign
from tt_host.runs.state import STARTED
from tt_host.runs.store import RunDir
from tt_host.spec.compiler import compile_spec
from tt_host.spec.loading import LoadedSpec
from tt_host.spec.split import RecordedSplit, legacy_split
from tt_host.synthesis.stage import SYNTHESIZE


@dataclass(frozen=True)
class Decision:
    stage: str
    action: str  # run | resume | reuse | rerun | skip | refuse
    reason: str
    resume: bool = False  # the stage is told to continue from its own saved state

    def as_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "action": self.action, "reason": self.reason}


def _why(index: int, plan: list[PlannedStage], old: dict[str, Any], cache: dict[int, list[str]]) -> list[str]:
    """What changed for stage `index`: its own inputs, else (recursively) those of the stages it reads."""
    if index in cache:
        return cache[index]
    stage, inputs = plan[index].stage, plan[index].inputs
    record = old.get(stage.name) or {}
    found = changed_keys(record.get("inputs") or {}, inputs) if record.get("inputs") is not None else []
    if not found:
        stages = [planned.stage for planned in plan]
        for name in needs(stages, index):
            up = next(i for i, s in enumerate(stages) if s.name == name)
            if (old.get(name) or {}).get("fingerprint") != plan[up].fingerprint:
                found += [f"{key} (via stage {name!r})" if "(via" not in key else key
                          for key in _why(up, plan, old, cache)]
    cache[index] = list(dict.fromkeys(found))
    return cache[index]


def _general_only(record: dict[str, Any], inputs: dict[str, Any]) -> bool:
    changed = changed_keys(record.get("inputs") or {}, inputs) if record.get("inputs") is not None else []
    return bool(changed) and all(key.startswith(tuple(k.lstrip("_") for k in OUTSIDE_CHAIN_KEYS)) for key in changed)


def decide(plan: list[PlannedStage], state: Optional[dict[str, Any]], run: Optional[RunDir], spec,
           only: Optional[frozenset[str]] = None) -> list[Decision]:
    """One Decision per stage. `state` is the run's run.json (None for a new run); `only`, the stages a
    pipeline document's steps run (None: all)."""
    old = (state or {}).get("stages") or {}
    cache: dict[int, list[str]] = {}
    out = []
    for index, (stage, inputs, fingerprint) in enumerate(plan):
        record = old.get(stage.name) or {}
        was = record.get("state") or "pending"
        same = record.get("fingerprint") == fingerprint
        what = ", ".join(_why(index, plan, old, cache)) or "an earlier stage's inputs"
        if not stage.enabled(spec):
            if was in STARTED and not stage.replaceable and not same:
                out.append(Decision(stage.name, "refuse", f"{was} in this run directory, but this spec skips it "
                                    f"(changed: {what}); use a new run directory"))
            else:
                out.append(Decision(stage.name, "skip", "this spec turns it off"))
            continue
        if only is not None and stage.name not in only:
            if same and was == "completed" and run is not None and record.get("result_sha256") == run.result_digest(
                    stage.name):
                out.append(Decision(stage.name, "reuse", "completed earlier with the same inputs (no step runs it)"))
            else:
                out.append(Decision(stage.name, "leave", "no step of this pipeline runs it; left as it is"))
            continue
        if was in ("pending", "skipped"):
            out.append(Decision(stage.name, "run", "not run yet in this run directory"))
        elif same and was == "completed":
            if run is not None and record.get("result_sha256") == run.result_digest(stage.name):
                out.append(Decision(stage.name, "reuse", "completed earlier with the same inputs"))
            else:
                out.append(Decision(stage.name, "resume", "completed earlier, but its result.json changed", True))
        elif same:
            out.append(Decision(stage.name, "resume", f"{was} earlier with the same inputs; continues", True))
        elif _general_only(record, inputs):  # only the general-regression set or benchmarks changed: again
            out.append(Decision(stage.name, "run", "the general-regression set or benchmarks changed; answers them "
                                "again", True))
        elif stage.replaceable:
            out.append(Decision(stage.name, "rerun", f"{was} earlier with other inputs (changed: {what}); "
                                "runs again from scratch"))
        elif was == "failed":  # nothing finished is lost: e.g. a corpus fixed after a bad line
            out.append(Decision(stage.name, "run", f"failed earlier; inputs changed ({what})", True))
        else:
            out.append(Decision(stage.name, "refuse", f"{was} with different inputs (changed: {what}); resuming "
                                "would invalidate finished work. Use a new run directory (drop --resume, or pass a "
                                "new DIR)."))
    return unmet_needs(plan, without_stale_rows(plan, out), only)


def without_stale_rows(plan: list[PlannedStage], decisions: list[Decision]) -> list[Decision]:
    """When `synthesize` is not reused, a finished or started stage that trains on its rows (or reads one that
    does) runs again: it ran without the rows its fingerprint names. See the module's docstring."""
    synthesize = next((d for d in decisions if d.stage == SYNTHESIZE), None)
    if synthesize is None or synthesize.action == "reuse":
        return decisions
    stages = [planned.stage for planned in plan]
    stale: set[str] = set()
    out = []
    for index, (planned, decision) in enumerate(zip(plan, decisions)):
        reads = [SYNTHESIZE] if SYNTHESIS_KEY in planned.inputs else [n for n in needs(stages, index) if n in stale]
        if reads and decision.action in ("reuse", "resume"):
            why = (f"it ran without the rows of stage {reads[0]!r}, which runs now" if reads[0] == SYNTHESIZE
                   else f"stage {reads[0]!r}, which it reads, runs again")
            decision = (Decision(decision.stage, "rerun", f"{why}; runs again from scratch") if planned.stage.replaceable
                        else Decision(decision.stage, "refuse", f"started earlier, but {why} (its training data was "
                                      "not what its inputs name); use a new run directory (drop --resume, or pass a "
                                      "new DIR)"))
            stale.add(decision.stage)
        out.append(decision)
    return out


def unmet_needs(plan: list[PlannedStage], decisions: list[Decision], only: Optional[frozenset[str]]) -> list[Decision]:
    """A stage a pipeline document runs that reads (declared `needs`) a stage it leaves undone is refused."""
    if only is None:
        return decisions
    by_name = {d.stage: d for d in decisions}
    out = []
    for planned, decision in zip(plan, decisions):
        reads = (*(planned.stage.needs or ()), *((SYNTHESIZE,) if SYNTHESIS_KEY in planned.inputs else ()))
        left = [n for n in reads if n in by_name and by_name[n].action == "leave"]
        if planned.stage.name in only and decision.action not in ("skip", "refuse") and left:
            decision = Decision(decision.stage, "refuse", f"run by this pipeline, but it reads stage {left[0]!r}, "
                                "which no step runs and which has not finished in this run directory; add the step "
                                "that runs it, or turn it off in the spec")
        out.append(decision)
    return out


def refusal(decisions: list[Decision]) -> Optional[str]:
    """The message of the first refused stage (None when the run may go ahead)."""
    for decision in decisions:
        if decision.action == "refuse":
            return f"stage {decision.stage!r} is {decision.reason}"
    return None


# ------------------------------------------------------------------ the run folder, its engine and its split

def new_run_id(spec_sha: str) -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + f"-{spec_sha[:8]}"


def default_run_dir(spec_path: Path, run_id: str) -> Path:
    return spec_path.parent.joinpath(*runlayout.RUNS_FOLDER, run_id)


def spec_digest(loaded: LoadedSpec) -> str:
    return hashlib.sha256(canonical(loaded.spec.model_dump(mode="json")).encode()).hexdigest()


def same_engine(state: dict[str, Any], loaded: LoadedSpec) -> None:
    if state.get("engine") != loaded.engine.name:
        raise RunRefused(
            f"run directory was made by engine {state.get('engine')!r}, the spec asks for {loaded.engine.name!r}; "
            "use a new run directory"
        )


def kept_split(loaded: LoadedSpec, state: dict[str, Any], run: RunDir) -> LoadedSpec:
    """The spec compiled with the split the existing run started with (tt_host.spec.split): recorded in
    run.json, or, for a run made before splits were recorded, the old rule applied to its spec.json."""
    recorded = RecordedSplit.from_json(state.get("split"))
    if recorded is None:
        try:
            recorded = legacy_split(json.loads(run.spec_json.read_text(encoding="utf-8")))
        except (OSError, ValueError, AttributeError):
            return loaded
    return replace(loaded, compiled=compile_spec(loaded.spec, recorded))


def preview(loaded: LoadedSpec, run_dir: Optional[Path],
            only: Optional[frozenset[str]] = None) -> tuple[Path, bool, list[Decision]]:
    """What `execute` would do, without locking or writing anything: (run dir, exists, decisions).
    Raises RunRefused for a folder that is not a run directory or one made by another engine."""
    plan = chain(loaded.engine, loaded.spec, loaded.compiled)
    if run_dir is None:
        run_dir = default_run_dir(loaded.path, new_run_id(spec_digest(loaded)))
        return run_dir, False, decide(plan, None, None, loaded.spec, only)
    check_run_path(run_dir)
    run = RunDir(run_dir)
    if not run.exists():
        refuse_foreign(run)
        return run.path, False, decide(plan, None, None, loaded.spec, only)
    state = run.load()
    same_engine(state, loaded)
    loaded = kept_split(loaded, state, run)
    plan = chain(loaded.engine, loaded.spec, loaded.compiled)
    return run.path, True, decide(plan, state, run, loaded.spec, only)
