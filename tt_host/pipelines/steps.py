"""A pipeline document's steps onto an engine's stages, and what each step leaves in the run folder.

The behavior vocabulary (`train`, `evaluate`, `compare`) is read from the stages' own declarations, so it fits
any engine: `train` is every stage that evaluates nothing (e.g. prepare, prefetch, train);
`evaluate {model: "base"}` is the stages that evaluate the base model (`Stage.evaluates == "baseline"`) with the
model stages before them; `evaluate {model: {from: train.model}}` the other evaluating stages with theirs;
`compare` runs nothing (it reads two evaluations). A step that runs (or stands on) a stage training on synthetic
rows (`Stage.gets_synthetic_rows`) also runs the host's `synthesize` stage when the spec has a `synthesis` block,
first, as `tt run` does: so `train` includes `synthesize`, and the plan lists it. The from-scratch vocabulary's steps map onto the stages the
engine's record names (`Engine.pipeline_vocabulary`). The run itself is `tt run`'s (tt_host.runs.drive) limited to these
stages: a stage of the
engine outside them is reused when it finished earlier with the same inputs and left as it is otherwise, so a
partial or repeated pipeline reuses what is finished.

After the run, every evaluate and compare step writes `<run>/evaluations/<step>.json`: its model, evaluator,
stages and metrics (a compare step: both sides and the difference).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Optional

from tt_host.engine import Engine, Stage
from tt_host.fsutil import make_private_dir, write_json_atomic
from tt_host.pipelines.document import DocumentError, declared_runtime, vocabulary_problems
from tt_host.synthesis.stage import SYNTHESIZE
from tt_stagekit.sides import BASELINE_SIDE

EVALUATIONS = "evaluations"


def runtimes(engines: Iterable[Engine]) -> tuple[str, ...]:
    """The runtime keywords the engines declare (`PipelineVocabulary.runtime`), sorted: what a document's
    `runtime.engine` may name."""
    return tuple(sorted({e.pipeline_vocabulary.runtime for e in engines if e.pipeline_vocabulary is not None}))


def _evaluating(stage: Stage) -> bool:
    return bool(stage.evaluates or stage.general)


def _deps(engine: Engine, stage: Stage) -> list[str]:
    """The model stages `stage` stands on: its declared needs (and theirs), or every model stage before it."""
    stages = list(engine.stages)
    by_name = {s.name: s for s in stages}
    if stage.needs is None:
        before = stages[:stages.index(stage)]
        return [s.name for s in before if not _evaluating(s)]
    found: list[str] = []
    for name in stage.needs:
        if name in by_name:
            found += _deps(engine, by_name[name]) + ([name] if not _evaluating(by_name[name]) else [])
    return list(dict.fromkeys(found))


def _behavior_stages(engine: Engine, step: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(the step's own stages, the model stages they stand on) for the behavior vocabulary."""
    uses = step["uses"]
    if uses == "compare":
        return [], []
    if uses == "train":
        return [s.name for s in engine.stages if not _evaluating(s)], []
    base = step["with"]["model"] == "base"
    own = [s for s in engine.stages if s.evaluates and (s.evaluates == BASELINE_SIDE) == base]
    if not own:
        which = "the base model" if base else "a trained model"
        raise DocumentError([f"step '{step['id']}': the {engine.name} engine has no stage that evaluates {which}"])
    return [s.name for s in own], [name for s in own for name in _deps(engine, s)]


def stages_for(engine: Engine, spec: Any, steps: list[dict[str, Any]],
               document: dict[str, Any]) -> dict[str, list[str]]:
    """Each selected step's own stages (in the engine's order). Refuses a vocabulary that is not the engine's, a
    step the engine has no stage for, and a step whose every stage this spec turns off."""
    vocabulary = engine.pipeline_vocabulary
    runtime = declared_runtime(document)  # normalized: a from-scratch document always declares its runtime
    from_scratch = runtime is not None
    if from_scratch != (vocabulary is not None) or (from_scratch and runtime != vocabulary.runtime):
        kind = f"a {runtime}" if from_scratch else "a behavior (train/evaluate/compare)"
        raise DocumentError([f"the pipeline is {kind} recipe, but the spec is for the {engine.name} engine; use a "
                             "matching recipe (`tt pipeline init`) or leave out -f"])
    if from_scratch and (problems := vocabulary_problems(vocabulary.steps, vocabulary.settings)):
        raise DocumentError([f"the {engine.name} engine's pipeline vocabulary does not speak Pipeline v1: "
                             + "; ".join(problems) + " (a fault of its plugin: report it to its authors)"])
    names = [s.name for s in engine.stages]
    out: dict[str, list[str]] = {}
    for step in steps:
        if from_scratch:
            key = step["with"]["evaluator"] if step["uses"] == "evaluate" else step["uses"]
            own = [name for name in vocabulary.steps.get(key, ()) if name in names]
            if step["uses"] != "compare" and not own:
                raise DocumentError([f"step '{step['id']}': the {engine.name} engine has no stage for {key}"])
            deps: list[str] = []
        else:
            own, deps = _behavior_stages(engine, step)
        stages = [s for s in engine.stages if s.name in own]
        if stages and not any(s.enabled(spec) for s in stages):
            raise DocumentError([f"step '{step['id']}' runs stage {stages[0].name!r}, which this spec turns off; "
                                 "change the spec or leave the step out"])
        listed = [name for name in names if name in set(own) | set(deps)]
        out[step["id"]] = _with_synthesis(engine, spec, listed)
    return out


def _with_synthesis(engine: Engine, spec: Any, names: list[str]) -> list[str]:
    """`names`, with the host's synthesize stage first when the spec has a synthesis block and one of them trains on
    its rows: a pipeline runs what `tt run` runs, never a training stage without the rows it was planned with."""
    if getattr(spec, "synthesis", None) is None:
        return names
    if any(s.gets_synthetic_rows and s.enabled(spec) for s in engine.stages if s.name in names):
        return [SYNTHESIZE, *names]
    return names


def setting_warnings(engine: Engine, spec: Any, steps: list[dict[str, Any]]) -> list[str]:
    """A from-scratch step's `with` setting that differs from the spec: the spec decides (one warning each)."""
    vocabulary = engine.pipeline_vocabulary
    if vocabulary is None:
        return []
    block = getattr(spec, vocabulary.block, None)
    warnings = []
    for step in steps:
        for key, field in vocabulary.settings.get(step["uses"], {}).items():
            given = (step.get("with") or {}).get(key)
            value = getattr(block, field, None)
            if given is not None and block is not None and given != value:
                warnings.append(f"step {step['id']}.{key} is {given}, the spec's {vocabulary.block}.{field} is "
                                f"{value}: the "
                                "spec decides (a pipeline selects stages, it never changes training settings)")
    return warnings


def _prefixes(engine: Engine, names: list[str]) -> tuple[str, ...]:
    """The metric prefixes of a step's evaluating stages (of all its stages when none evaluates, e.g. bpb)."""
    stages = [s for s in engine.stages if s.name in names]
    stages = [s for s in stages if _evaluating(s)] or stages
    return tuple(dict.fromkeys([f"{s.evaluates}." for s in stages if s.evaluates] + [f"{s.name}." for s in stages]))


def write_evaluations(run_dir: Path, engine: Engine, steps: list[dict[str, Any]], own: dict[str, list[str]],
                      report: dict[str, Any], run_json: dict[str, Any]) -> list[str]:
    """`<run>/evaluations/<step>.json` for every evaluate and compare step whose stages completed; their names."""
    metrics = report.get("metrics") or {}
    states = {name: (record or {}).get("state") for name, record in (run_json.get("stages") or {}).items()}
    written: dict[str, dict[str, Any]] = {}
    for step in steps:
        if step["uses"] == "evaluate":
            names = [n for n in own[step["id"]] if states.get(n) == "completed"]
            if not names:
                continue
            prefixes = _prefixes(engine, names)
            written[step["id"]] = {
                "step": step["id"], "uses": "evaluate", "model": step["with"]["model"],
                "evaluator": step["with"]["evaluator"], "stages": names, "run_id": run_json.get("id"),
                "metrics": {k: v for k, v in metrics.items() if k.startswith(prefixes)}}
        elif step["uses"] == "compare":
            before, after = (written.get(step["with"][side]["from"].rsplit(".", 1)[0]) for side in ("before", "after"))
            if before is None or after is None:
                continue
            written[step["id"]] = {"step": step["id"], "uses": "compare", "before": before["step"],
                                   "after": after["step"], "run_id": run_json.get("id"),
                                   "difference": _difference(before["metrics"], after["metrics"])}
    if written:
        folder = Path(run_dir) / EVALUATIONS
        make_private_dir(folder)
        for name, data in written.items():
            write_json_atomic(folder / f"{name}.json", data)
    return list(written)


def _difference(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Optional[float]]:
    """after - before for each metric both sides have under the same name after their prefix."""
    def strip(metrics: dict[str, Any]) -> dict[str, Any]:
        return {k.split(".", 1)[1]: v for k, v in metrics.items() if "." in k}

    left, right = strip(before), strip(after)
    return {name: right[name] - left[name] for name in sorted(set(left) & set(right))
            if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (left[name], right[name]))}
