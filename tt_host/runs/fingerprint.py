"""Per-stage fingerprints: a hash of every input a stage reads, and of the stages it reads from.

fingerprint(stage) = sha256(engine, stage name, module, the stage's declared
inputs, plus the compiled system message and rows when the stage reads them,
and the fingerprints of the stages it needs: by default the stage just before
it, so the fingerprints form a chain; an engine that declares `Stage.needs`
gets a graph instead, and a change reaches only the stages that read it). The
declared inputs are kept in run.json so a refusal can name what changed.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, NamedTuple, Sequence

from tt_host.canonical import canonical
from tt_host.engine import Engine, Stage, gate_side
from tt_host.spec.compiler import CompiledSpec
from tt_host.spec.schema import BehaviorSpec
from tt_host.synthesis import stage as synthesis_stage

# Host-added inputs, and how messages name them.
SPEC_TEXT_NAMES = {"system_message_sha256": "the instruction (system_prompt, guidelines, constraints)",
                   "rows_sha256": "examples", "synthesis": "synthesis (the teacher's rows)"}
SYNTHESIS_KEY = "_synthesis"


def rows_digest(compiled: CompiledSpec) -> str:
    return hashlib.sha256(canonical([compiled.train_rows, compiled.eval_rows]).encode()).hexdigest()


def stage_inputs(stage: Stage, spec: BehaviorSpec, compiled: CompiledSpec) -> dict[str, Any]:
    inputs = dict(stage.inputs(spec))
    if stage.reads_spec_text(spec):
        inputs["_system_message_sha256"] = compiled.system_message_sha256
        inputs["_rows_sha256"] = rows_digest(compiled)
    return json.loads(canonical(inputs))


GENERAL_KEY = "_general_regression"


def general_inputs(spec: BehaviorSpec) -> Any:
    """What the general-regression answers depend on (dataset digest, system prompt), or None when not set.
    The gate's policy (max drops) is not an input: changing it only re-writes the report."""
    policy = spec.evaluation.general_regression if spec.evaluation else None
    return policy.data_inputs() if policy else None


BENCHMARKS_KEY = "_benchmarks"
OUTSIDE_CHAIN_KEYS = (GENERAL_KEY, BENCHMARKS_KEY)  # inputs of the gate's stages that training never reads


def benchmark_inputs(spec: BehaviorSpec) -> Any:
    """What the lm-eval scores depend on (tasks and their files' digests, limit, few-shot count), or None when
    not set. The per-task metric and max_drop are policy, not inputs: changing them only re-writes the report."""
    benchmarks = spec.evaluation.benchmarks if spec.evaluation else None
    return benchmarks.data_inputs() if benchmarks else None


def needs(stages: Sequence[Stage], index: int) -> tuple[str, ...]:
    """Names of the stages whose outputs stage `index` reads."""
    stage = stages[index]
    if stage.needs is None:  # the engine stage before it (the host's synthesize stage is no link of the chain)
        earlier = [s for s in stages[:index] if not synthesis_stage.is_host_stage(s)]
        return (earlier[-1].name,) if earlier else ()
    return tuple(stage.needs)


class PlannedStage(NamedTuple):
    """One stage of a run's plan: the stage, the inputs it reads (kept in run.json) and its fingerprint."""

    stage: Stage
    inputs: dict[str, Any]
    fingerprint: str


def chain(engine: Engine, spec: BehaviorSpec, compiled: CompiledSpec) -> list[PlannedStage]:
    """The PlannedStage of every stage of the engine, in order.

    The stages answering the general-regression set (tt_host.engine.gate_side) also
    hash its inputs and the benchmarks' (`OUTSIDE_CHAIN_KEYS`), outside the chain: a new
    general set or benchmark re-runs both evaluations and nothing else (training does not
    depend on them)."""
    prints: dict[str, str] = {}  # the chained part of each fingerprint, which later stages hash
    out = synthesis_plan(spec, compiled)  # the host's own stage first, when the spec has a synthesis block
    general = general_inputs(spec)
    outside = {key: value for key, value in ((GENERAL_KEY, general), (BENCHMARKS_KEY, benchmark_inputs(spec)))
               if value is not None}
    for index, stage in enumerate(engine.stages):
        inputs = stage_inputs(stage, spec, compiled)
        if out and stage.gets_synthetic_rows:
            inputs[SYNTHESIS_KEY] = out[0].fingerprint
        if stage.needs is None:  # the chained form (its payload is unchanged since fingerprints began)
            previous: Any = prints[engine.stages[index - 1].name] if index else ""
        else:
            previous = {name: prints[name] for name in stage.needs}
        payload = canonical({"engine": engine.name, "stage": stage.name, "module": stage.module,
                             "inputs": inputs, "previous": previous})
        prints[stage.name] = fingerprint = hashlib.sha256(payload.encode()).hexdigest()
        if outside and gate_side(stage) is not None:
            inputs.update(outside)
            fingerprint = hashlib.sha256(canonical({"chain": fingerprint, **outside}).encode()).hexdigest()
        out.append(PlannedStage(stage, inputs, fingerprint))
    return out


def synthesis_plan(spec: BehaviorSpec, compiled: CompiledSpec) -> list[PlannedStage]:
    """[the `synthesize` stage] when the spec has a synthesis block, else []."""
    if getattr(spec, "synthesis", None) is None:
        return []
    inputs = stage_inputs(synthesis_stage.STAGE, spec, compiled)
    payload = canonical({"host": True, "stage": synthesis_stage.SYNTHESIZE, "inputs": inputs})
    return [PlannedStage(synthesis_stage.STAGE, inputs, hashlib.sha256(payload.encode()).hexdigest())]


def changed_keys(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Dotted names of the inputs that differ (for messages)."""
    keys = []

    def walk(a: Any, b: Any, prefix: str) -> None:
        if isinstance(a, dict) and isinstance(b, dict):
            for key in sorted(set(a) | set(b)):
                walk(a.get(key), b.get(key), f"{prefix}.{key}" if prefix else str(key))
        elif a != b:
            keys.append(prefix or "(inputs)")

    walk(old, new, "")
    return [SPEC_TEXT_NAMES.get(k.lstrip("_"), k.lstrip("_")) for k in keys]
