"""Pipeline documents (`tunedtensor.pipeline.json`, the public Pipeline v1 contract): read, check, normalize, select.

A document is `{version: 1, name?, target?, runtime?, steps: 1..16}`. Steps: `train` (-> model), `evaluate {model:
"base" | {from: "<step>.model"}, evaluator}` (-> report), `compare {before, after}` (-> comparison), and the
from-scratch vocabulary (`runtime.engine` naming an engine that declares it, `Engine.pipeline_vocabulary`): `tokenize`
(-> tokenizer), `pretrain`, `finetune`, `rl` (-> model) with the evaluators `bpb`, `chat`, `inference`. The rules are
the contract's (its `src/index.ts`): a reference points at an earlier step's output of the right kind, at most one
`train`, ids unique and `^[a-z][a-z0-9_-]*$`, every step has a target. tt runs local steps only, so a step whose target is not `local` is
refused too. Every problem is a `DocumentError` (exit 2) naming the step; nothing here touches a run. The runtime
keywords a document may use are the ones the installed engines declare (`runtimes`, read by the caller from their
records), so this module names no engine.

`normalize` returns the contract's normalized form (targets resolved, `evaluator` defaulted, the document's
`target` dropped); `select` applies `--only` / `--skip` with the contract CLI's three refusals (unknown step,
empty selection, a step whose producer was left out).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional, Sequence, Union

from tt_host.errors import TTError

VERSION = 1
MAX_STEPS = 16
TARGETS = ("local", "cloud")
# A document whose `runtime.engine` names an engine's declared runtime keyword (`PipelineVocabulary.runtime`) uses the
# from-scratch vocabulary below; that engine's record says with which stages it runs each step.
REFERENCE_KEY, MODEL_KEY, EVALUATOR_KEY = "reference", "model-or-base", "evaluator"


@dataclass(frozen=True)
class StepKind:
    """One step kind of the contract, the one definition of its shape: what it produces, its `with` keys in the
    contract's order (an integer key's inclusive bounds, or what the key holds: a reference to an earlier step's
    output, the evaluate step's model ("base" or a reference) or its evaluator), the keys it requires (a step that
    requires any requires `with`)."""

    output: str
    keys: Mapping[str, Union[tuple[int, int], str]] = field(default_factory=dict)
    required: tuple[str, ...] = ()


STEPS_BOUNDS, BATCH_BOUNDS = (1, 10_000_000), (1, 1024)
STEPS: dict[str, StepKind] = {
    "train": StepKind("model"),
    "evaluate": StepKind("report", {"model": MODEL_KEY, "evaluator": EVALUATOR_KEY}, ("model",)),
    "compare": StepKind("comparison", {"before": REFERENCE_KEY, "after": REFERENCE_KEY}, ("before", "after")),
    "tokenize": StepKind("tokenizer", {"vocabSize": (64, 65_536), "maxChars": (1_000, 2_000_000_000)}),
    "pretrain": StepKind("model", {"tokenizer": REFERENCE_KEY, "depth": (1, 64), "steps": STEPS_BOUNDS,
                                   "batchSize": BATCH_BOUNDS, "sequenceLength": (16, 8192), "nprocPerNode": (1, 16)},
                         ("tokenizer",)),
    "finetune": StepKind("model", {"model": REFERENCE_KEY, "steps": STEPS_BOUNDS, "batchSize": BATCH_BOUNDS},
                         ("model",)),
    "rl": StepKind("model", {"model": REFERENCE_KEY, "steps": STEPS_BOUNDS}, ("model",)),
}
USES = tuple(STEPS)
RUNTIME_USES = ("tokenize", "pretrain", "finetune", "rl")
EVALUATORS = ("behavior", "bpb", "chat", "inference")
RUNTIME_EVALUATORS = ("bpb", "chat", "inference")
OUTPUTS = {uses: kind.output for uses, kind in STEPS.items()}
# An integer `with` key's bounds, whichever step holds it (the contract checks a value by its key alone).
INT = {key: spec for kind in STEPS.values() for key, spec in kind.keys.items() if isinstance(spec, tuple)}
REFERENCE_KEYS = tuple(dict.fromkeys(key for kind in STEPS.values() for key, spec in kind.keys.items()
                                     if spec in (REFERENCE_KEY, MODEL_KEY)))
STEP_ID = re.compile(r"[a-z][a-z0-9_-]*")  # used with fullmatch: `$` would let a final newline through
STEP_ID_MAX = 64
REFERENCE = re.compile(r"[a-z][a-z0-9_-]*\.[a-z][a-z0-9_]*")


class DocumentError(TTError, ValueError):
    """A pipeline document or selection the contract refuses (exit 2); `problems` lists every one found."""

    exit_code = 2

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("invalid pipeline: " + "; ".join(problems))


def declared_runtime(document: dict[str, Any]) -> Optional[str]:
    """The document's `runtime.engine` keyword, if it gives one."""
    return (document.get("runtime") or {}).get("engine")


def uses_runtime_vocabulary(document: dict[str, Any], runtimes: Sequence[str]) -> bool:
    """Whether the document is a from-scratch recipe (a declared runtime keyword, or any of that vocabulary's steps)."""
    return declared_runtime(document) in runtimes or any(
        step.get("uses") in RUNTIME_USES for step in document.get("steps", []))


def _runtime_name(document: dict[str, Any], runtimes: Sequence[str]) -> str:
    """How a message names the runtime a from-scratch step needs: the document's, else the one installed engine's."""
    if declared_runtime(document) in runtimes:
        return declared_runtime(document)
    return runtimes[0] if len(runtimes) == 1 else "/".join(runtimes) or "<an engine with a pipeline vocabulary>"


def _structure(doc: Any, runtimes: Sequence[str]) -> list[str]:
    """The schema's checks (strict objects, types, bounds), each as `path: message`."""
    if not isinstance(doc, dict):
        return ["the pipeline document must be a JSON object"]
    problems = [f"{key}: unknown field (misspelled?)" for key in doc if key not in
                ("version", "name", "target", "runtime", "steps")]
    if doc.get("version") != VERSION or isinstance(doc.get("version"), bool):
        problems.append(f"version: must be {VERSION}")
    name = doc.get("name")
    if "name" in doc and not (isinstance(name, str) and 1 <= len(name) <= 120):
        problems.append("name: must be a string of 1 to 120 characters")
    if "target" in doc and doc["target"] not in TARGETS:
        problems.append("target: must be 'local' or 'cloud'")
    if "runtime" in doc and doc["runtime"] not in [{"engine": name} for name in runtimes]:
        problems.append("runtime: must be " + " or ".join(f"{{\"engine\": \"{name}\"}}" for name in runtimes)
                        if runtimes else "runtime: no installed engine declares a pipeline runtime")
    steps = doc.get("steps")
    if not isinstance(steps, list) or not 1 <= len(steps) <= MAX_STEPS:
        return problems + [f"steps: must be a list of 1 to {MAX_STEPS} steps"]
    for index, step in enumerate(steps):
        problems += [f"steps.{index}.{p}" for p in _step_structure(step)]
    return problems


def _step_structure(step: Any) -> list[str]:
    if not isinstance(step, dict):
        return ["must be an object {id, uses, target?, with?}"]
    uses = step.get("uses")
    if uses not in USES:
        return [f"uses: must be one of {', '.join(USES)}"]
    keys, required = STEPS[uses].keys, STEPS[uses].required
    allowed = ("id", "uses", "target") + (("with",) if keys else ())
    problems = [f"{key}: unknown field (misspelled?)" for key in step if key not in allowed]
    sid = step.get("id")
    if isinstance(sid, str) and len(sid) > STEP_ID_MAX:
        problems.append(f"id: is {len(sid)} characters long; step IDs are at most {STEP_ID_MAX} characters")
    elif not (isinstance(sid, str) and STEP_ID.fullmatch(sid)):
        problems.append("id: step IDs must use lowercase letters, numbers, '-' or '_' (starting with a letter)")
    if "target" in step and step["target"] not in TARGETS:
        problems.append("target: must be 'local' or 'cloud'")
    if "with" not in step:
        return problems + (["with: required"] if required else [])
    block = step["with"]
    if not isinstance(block, dict):
        return problems + ["with: must be an object"]
    problems += [f"with.{key}: unknown field (misspelled?)" for key in block if key not in keys]
    problems += [f"with.{key}: required" for key in required if key not in block]
    for key, value in block.items():
        if key in INT and not (type(value) is int and INT[key][0] <= value <= INT[key][1]):
            problems.append(f"with.{key}: must be an integer from {INT[key][0]} to {INT[key][1]}")
        elif key == "evaluator" and value not in EVALUATORS:
            problems.append(f"with.evaluator: must be one of {', '.join(EVALUATORS)}")
        elif key in REFERENCE_KEYS and not (
                (key == "model" and uses == "evaluate" and value == "base") or _is_reference(value)):
            problems.append(f"with.{key}: artifact references must use {{\"from\": \"<step-id>.<output>\"}}"
                            + (" or \"base\"" if key == "model" and uses == "evaluate" else ""))
    return problems


def _is_reference(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"from"} and isinstance(value["from"], str) and bool(
        REFERENCE.fullmatch(value["from"]))


def _producer(consumer: str, reference: dict[str, str], kind: str, seen: dict[str, dict[str, Any]]) -> dict[str, Any]:
    producer_id, output = reference["from"].rsplit(".", 1)
    producer = seen.get(producer_id)
    if producer is None:
        raise DocumentError([f"step '{consumer}' references '{reference['from']}', but artifacts must come from a "
                             "prior step"])
    if OUTPUTS[producer["uses"]] != output:
        raise DocumentError([f"step '{producer_id}' ({producer['uses']}) does not produce '{output}'"])
    if output != kind:
        raise DocumentError([f"step '{consumer}' requires a '{kind}' artifact, not '{output}'"])
    return producer


def _semantics(doc: dict[str, Any], runtimes: Sequence[str]) -> list[dict[str, Any]]:
    """The contract's rules over a structurally valid document, in its order; the normalized steps."""
    runtime = _runtime_name(doc, runtimes)
    from_scratch = uses_runtime_vocabulary(doc, runtimes)
    if from_scratch and declared_runtime(doc) not in runtimes:
        raise DocumentError([f"{runtime} steps require runtime.engine to be '{runtime}'"])
    seen: dict[str, dict[str, Any]] = {}
    steps, trains = [], 0
    for raw in doc["steps"]:
        sid, uses = raw["id"], raw["uses"]
        target = raw.get("target", doc.get("target"))
        if target is None:
            raise DocumentError([f"step '{sid}' needs a target or a pipeline default target"])
        step = {**raw, "target": target}
        if uses == "evaluate":
            step["with"] = {"model": raw["with"]["model"], "evaluator": raw["with"].get("evaluator", "behavior")}
        if sid in seen:
            raise DocumentError([f"step IDs must be unique; '{sid}' is duplicated"])
        evaluator = step["with"]["evaluator"] if uses == "evaluate" else None
        if from_scratch:
            if target != "local":
                raise DocumentError([f"{runtime} step '{sid}' must target local execution"])
            if uses == "train":
                raise DocumentError([f"{runtime} pipelines cannot include a train step; use pretrain, "
                                     "finetune, or rl"])
            if evaluator == "behavior":
                raise DocumentError([f"{runtime} evaluate step '{sid}' cannot use the behavior evaluator"])
        elif uses in RUNTIME_USES or (evaluator not in (None, "behavior")):
            raise DocumentError([f"step '{sid}' requires runtime.engine '{runtime}' for {evaluator or uses}"])
        if uses == "train":
            trains += 1
            if trains > 1:
                raise DocumentError([f"step '{sid}': Pipeline v1 supports at most one train step because model "
                                     "artifacts are run-scoped"])
        elif uses == "evaluate":
            model = step["with"]["model"]
            if evaluator in RUNTIME_EVALUATORS:
                if model == "base":
                    raise DocumentError([f"evaluate step '{sid}' with evaluator '{evaluator}' requires a prior "
                                         "model reference"])
                if _producer(sid, model, "model", seen)["uses"] not in ("pretrain", "finetune", "rl"):
                    raise DocumentError([f"evaluate step '{sid}' must reference a pretrain, finetune, or rl model"])
            elif model != "base" and _producer(sid, model, "model", seen)["uses"] != "train":
                raise DocumentError([f"evaluate step '{sid}' with the behavior evaluator must reference a train model"])
        elif uses == "compare":
            if step["with"]["before"]["from"] == step["with"]["after"]["from"]:
                raise DocumentError([f"compare step '{sid}' requires two distinct report references"])
            _producer(sid, step["with"]["before"], "report", seen)
            _producer(sid, step["with"]["after"], "report", seen)
        elif uses in ("pretrain", "finetune", "rl"):
            kind = "tokenizer" if uses == "pretrain" else "model"
            source = _producer(sid, step["with"][kind], kind, seen)["uses"]
            allowed = {"pretrain": ("tokenize",), "finetune": ("pretrain", "finetune"), "rl": ("finetune", "rl")}[uses]
            if source not in allowed:
                raise DocumentError([f"{uses} step '{sid}' must reference a {' or '.join(allowed)} "
                                     f"{'tokenizer' if uses == 'pretrain' else 'model'}"])
        seen[sid] = step
        steps.append(step)
    return steps


def vocabulary_problems(steps: Mapping[str, Any], settings: Mapping[str, Mapping[str, str]]) -> list[str]:
    """What an engine's declared from-scratch vocabulary (`PipelineVocabulary.steps` and `.settings`) names that the
    contract does not have: a step kind or evaluator outside it, a `with` key its step kind lacks."""
    kinds = set(RUNTIME_USES) | set(RUNTIME_EVALUATORS)
    problems = [f"steps: {kind!r} is no step kind or evaluator of the from-scratch vocabulary" for kind in steps
                if kind not in kinds]
    for uses, keys in settings.items():
        if uses not in RUNTIME_USES:
            problems.append(f"settings: {uses!r} is no step kind of the from-scratch vocabulary")
            continue
        problems += [f"settings.{uses}: {key!r} is no `with` key of a {uses} step" for key in keys
                     if key not in STEPS[uses].keys]
    return problems


def normalize(doc: Any, runtimes: Sequence[str]) -> dict[str, Any]:
    """The contract's normalized document; DocumentError for anything it refuses. `runtimes`: the runtime keywords
    the installed engines declare."""
    problems = _structure(doc, runtimes)
    if problems:
        raise DocumentError(problems)
    steps = _semantics(doc, runtimes)
    out: dict[str, Any] = {"version": VERSION}
    if doc.get("name"):
        out["name"] = doc["name"]
    if doc.get("runtime"):
        out["runtime"] = doc["runtime"]
    out["steps"] = steps
    return out


def check_local(normalized: dict[str, Any]) -> None:
    """tt executes local steps only: a step targeting the hosted runner is refused, naming it."""
    for step in normalized["steps"]:
        if step["target"] != "local":
            raise DocumentError([f"step '{step['id']}' targets {step['target']!r}; tt runs every step on this "
                                 "machine, so set its target (or the document's) to \"local\""])


def references(step: dict[str, Any]) -> list[str]:
    """The producer step ids a step reads."""
    block = step.get("with") or {}
    refs = [block[key] for key in REFERENCE_KEYS if isinstance(block.get(key), dict)]
    return [ref["from"].rsplit(".", 1)[0] for ref in refs]


def select(normalized: dict[str, Any], only: Optional[Iterable[str]] = None,
           skip: Optional[Iterable[str]] = None) -> list[dict[str, Any]]:
    """The steps `--only` / `--skip` leave, in document order."""
    only, skip = list(only or []), list(skip or [])
    ids = [step["id"] for step in normalized["steps"]]
    for sid in only + skip:
        if sid not in ids:
            raise DocumentError([f"unknown pipeline step {sid!r} (steps: {', '.join(ids)})"])
    kept = [step for step in normalized["steps"] if (not only or step["id"] in only) and step["id"] not in skip]
    if not kept:
        raise DocumentError(["the selection leaves no pipeline steps to run"])
    names = {step["id"] for step in kept}
    for step in kept:
        for producer in references(step):
            if producer not in names:
                raise DocumentError([f"step '{step['id']}' depends on '{producer}', which --only or --skip left out"])
    return kept


def canonical_local() -> dict[str, Any]:
    """`default-local`: baseline, train, candidate, compare (the contract's canonical recipe)."""
    return {"version": VERSION, "name": "default-local", "steps": [
        {"id": "baseline", "uses": "evaluate", "target": "local", "with": {"model": "base", "evaluator": "behavior"}},
        {"id": "train", "uses": "train", "target": "local"},
        {"id": "candidate", "uses": "evaluate", "target": "local",
         "with": {"model": {"from": "train.model"}, "evaluator": "behavior"}},
        {"id": "compare", "uses": "compare", "target": "local",
         "with": {"before": {"from": "baseline.report"}, "after": {"from": "candidate.report"}}},
    ]}


def canonical_runtime(runtime: str) -> dict[str, Any]:
    """The contract's smoke recipe for its from-scratch vocabulary under an engine's runtime keyword (`default-` +
    runtime)."""
    def evaluate(sid: str, source: str, evaluator: str) -> dict[str, Any]:
        return {"id": sid, "uses": "evaluate", "target": "local",
                "with": {"model": {"from": f"{source}.model"}, "evaluator": evaluator}}

    return {"version": VERSION, "name": f"default-{runtime}", "runtime": {"engine": runtime},
            "steps": [
        {"id": "tokenize", "uses": "tokenize", "target": "local"},
        {"id": "pretrain", "uses": "pretrain", "target": "local", "with": {
            "tokenizer": {"from": "tokenize.tokenizer"}, "depth": 2, "steps": 2, "batchSize": 2, "sequenceLength": 64}},
        evaluate("bpb", "pretrain", "bpb"),
        {"id": "sft", "uses": "finetune", "target": "local",
         "with": {"model": {"from": "pretrain.model"}, "steps": 2, "batchSize": 1}},
        evaluate("chat", "sft", "chat"),
        evaluate("infer", "sft", "inference"),
    ]}
