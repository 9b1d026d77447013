"""The contract's from-scratch recipe fitted to a spec (`tt pipeline init --RUNTIME` beside a spec of that runtime).

`default-RUNTIME` (tt_host.pipelines.document.canonical_runtime) is a smoke recipe: its `with` settings (depth 2,
2 steps, ...) are the contract's, and it has no `rl` step. Planned against a real spec its settings only warn (the
spec decides) and, for a spec that runs RL, its chat evaluation reads an `rl` stage no step runs. Fitted, each
step's `with` settings are the spec's values (the engine's `PipelineVocabulary.settings` say which field each key
is), and when the spec's value for the `rl` step's `steps` is above 0 an `rl` step follows the last finetune step,
with the evaluations of that finetune model moved onto the RL model (the model the spec's run ends with).
A setting two steps share and the spec holds once (`batchSize` of pretrain and finetune) gets the spec's value in
both.
"""

from __future__ import annotations

import copy
from typing import Any

from tt_host.engine import Engine

RL = "rl"  # the contract's step kind that refines a finetuned model


def fit(document: dict[str, Any], engine: Engine, spec: Any) -> dict[str, Any]:
    """A copy of `document` with the spec's settings, and an `rl` step where the spec runs RL."""
    vocabulary = engine.pipeline_vocabulary
    block = getattr(spec, vocabulary.block, None) if vocabulary is not None else None
    if block is None:
        return document
    fitted = copy.deepcopy(document)
    steps = fitted["steps"]
    for step in steps:
        for key, field in vocabulary.settings.get(step["uses"], {}).items():
            value = getattr(block, field, None)
            if value is not None and key in (step.get("with") or {}):
                step["with"][key] = value
    rl_steps = {key: getattr(block, field, None) for key, field in vocabulary.settings.get(RL, {}).items()}
    finetunes = [i for i, s in enumerate(steps) if s["uses"] == "finetune"]
    if not finetunes or not isinstance(rl_steps.get("steps"), int) or rl_steps["steps"] <= 0 \
            or any(s["uses"] == RL for s in steps):
        return fitted
    last = steps[finetunes[-1]]["id"]
    rl = {"id": RL, "uses": RL, "target": "local",
          "with": {"model": {"from": f"{last}.model"}, **{k: v for k, v in rl_steps.items() if v is not None}}}
    for step in steps[finetunes[-1] + 1:]:
        if step["uses"] == "evaluate" and step["with"].get("model") == {"from": f"{last}.model"}:
            step["with"]["model"] = {"from": f"{RL}.model"}
    steps.insert(finetunes[-1] + 1, rl)
    return fitted
