"""Per-stage fingerprints: a hash of every input a stage depends on, chained through the pipeline.

fingerprint(stage i) = sha256(engine, stage name, module, the stage's declared
inputs, the compiled system message and rows, fingerprint(stage i-1)). A change
upstream therefore changes every later fingerprint too. The declared inputs are
kept in run.json so a refusal can name what changed.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from tt_host.engine import Engine, Stage
from tt_host.gate import side
from tt_host.spec.compiler import CompiledSpec
from tt_host.spec.schema import BehaviorSpec


def canonical(data: Any) -> str:
    return json.dumps(data, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


def rows_digest(compiled: CompiledSpec) -> str:
    return hashlib.sha256(canonical([compiled.train_rows, compiled.eval_rows]).encode()).hexdigest()


def stage_inputs(stage: Stage, spec: BehaviorSpec, compiled: CompiledSpec) -> dict[str, Any]:
    inputs = dict(stage.inputs(spec))
    inputs["_system_message_sha256"] = compiled.system_message_sha256
    inputs["_rows_sha256"] = rows_digest(compiled)
    return json.loads(canonical(inputs))


GENERAL_KEY = "_general_regression"


def general_inputs(spec: BehaviorSpec) -> Any:
    """What the general-regression answers depend on (dataset digest, system prompt), or None when not set.
    The gate's policy (max drops) is not an input: changing it only re-writes the report."""
    policy = spec.evaluation.general_regression if spec.evaluation else None
    return policy.data_inputs() if policy else None


def chain(engine: Engine, spec: BehaviorSpec, compiled: CompiledSpec) -> list[tuple[Stage, dict[str, Any], str]]:
    """(stage, inputs, fingerprint) for every stage of the engine, in order.

    The stages answering the general-regression set (tt_host.gate.side) also
    hash its inputs, outside the chain: a new general set re-runs both evaluations and
    nothing else (training does not depend on it)."""
    previous = ""
    out = []
    general = general_inputs(spec)
    for stage in engine.stages:
        inputs = stage_inputs(stage, spec, compiled)
        payload = canonical({"engine": engine.name, "stage": stage.name, "module": stage.module,
                             "inputs": inputs, "previous": previous})
        previous = hashlib.sha256(payload.encode()).hexdigest()
        fingerprint = previous
        if general is not None and side(stage) is not None:
            inputs[GENERAL_KEY] = general
            fingerprint = hashlib.sha256(canonical({"chain": previous, GENERAL_KEY: general}).encode()).hexdigest()
        out.append((stage, inputs, fingerprint))
    return out


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
    return [k.lstrip("_") for k in keys]
