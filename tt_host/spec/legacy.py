"""Specs written for the Node `tt` CLI (0.13): legacy keys mapped to today's, with one warning each.

Only these keys are translated; any other unknown key stays an error
(the strict schema refuses it), so a misspelling keeps failing:

- `id`                                -> `name` (the spec's name identifies it today)
- `dataset_prebuilt {training, validation, test, format}`
                                      -> `datasets {train, validation, test}`
- `hyperparameters.base_model_revision` -> top-level `base_model_revision`
- `eval_cases [{input, output|expected_output}]`
                                      -> appended to `examples`; tt holds out its own
                                         deterministic ~20% of examples for evaluation
- `evaluation.generalRegression {dataset, systemPrompt, maxScoreDrop, maxPassRateDrop}`
                                      -> `evaluation.general_regression`, keys in snake_case

A legacy key next to its new one with a different value is an error naming
both (tt never guesses which one was meant). docs/migrating.md lists every
change and its reason. Nothing here touches the disk.
"""

from __future__ import annotations

import copy
from typing import Any

from tt_host.spec.errors import SpecError

PREBUILT_FORMATS = ("chat", "chat-jsonl", "chat_jsonl", "jsonl", "messages")
CAMEL_GATE_KEYS = {"systemPrompt": "system_prompt", "maxScoreDrop": "max_score_drop",
                   "maxPassRateDrop": "max_pass_rate_drop"}
PREBUILT_SPLITS = {"training": "train", "train": "train", "validation": "validation", "test": "test"}


def migrate(raw: dict[str, Any], spec_fields: set[str]) -> tuple[dict[str, Any], list[SpecError], list[SpecError]]:
    """(today's spec, warnings, errors) for a raw spec; `spec_fields` are the engine spec's top-level keys."""
    data = copy.deepcopy(raw)
    warnings: list[SpecError] = []
    errors: list[SpecError] = []

    def move(old: str, new: str, value: Any, note: str = "") -> None:
        if new in data and data[new] != value:
            errors.append(SpecError(old, f"legacy key `{old}` conflicts with `{new}` (different values); keep only `{new}`"))
            return
        data[new] = value
        warnings.append(SpecError(old, f"legacy key `{old}` is now `{new}`{note}; rename it (docs/migrating.md)"))

    if "id" in data:
        move("id", "name", data.pop("id"))

    hyper = data.get("hyperparameters")
    if isinstance(hyper, dict) and "base_model_revision" in hyper:
        hyper = dict(hyper)
        value = hyper.pop("base_model_revision")
        data["hyperparameters"] = hyper
        move("hyperparameters.base_model_revision", "base_model_revision", value)

    if "dataset_prebuilt" in data:
        block = data.pop("dataset_prebuilt")
        if "datasets" not in spec_fields:
            errors.append(SpecError("dataset_prebuilt", f"this engine takes no prebuilt datasets "
                                    "(legacy `dataset_prebuilt` maps to `datasets`); remove it"))
        elif not isinstance(block, dict):
            errors.append(SpecError("dataset_prebuilt", "must be an object {training, validation, test, format}"))
        else:
            datasets, ok = {}, True
            for key, value in block.items():
                if key == "format":
                    if value not in PREBUILT_FORMATS:
                        errors.append(SpecError("dataset_prebuilt.format", f"{value!r}: only chat JSONL "
                                                f"(`messages` rows) is read today ({', '.join(PREBUILT_FORMATS)})"))
                        ok = False
                elif key in PREBUILT_SPLITS:
                    datasets[PREBUILT_SPLITS[key]] = value
                else:
                    errors.append(SpecError(f"dataset_prebuilt.{key}", "unknown field (misspelled?); "
                                            "expected training, validation, test or format"))
                    ok = False
            if ok:
                move("dataset_prebuilt", "datasets", datasets, " ({training, validation, test} -> {train, validation, test}; "
                     "format is always chat JSONL)")

    evaluation = data.get("evaluation")
    if isinstance(evaluation, dict) and "generalRegression" in evaluation:
        evaluation = dict(evaluation)
        block = evaluation.pop("generalRegression")
        if isinstance(block, dict):
            block = {CAMEL_GATE_KEYS.get(key, key): value for key, value in block.items()}
        data["evaluation"] = evaluation
        if "general_regression" in evaluation and evaluation["general_regression"] != block:
            errors.append(SpecError("evaluation.generalRegression", "legacy key `evaluation.generalRegression` "
                                    "conflicts with `evaluation.general_regression`; keep only the new one"))
        else:
            evaluation["general_regression"] = block
            warnings.append(SpecError("evaluation.generalRegression", "legacy key `evaluation.generalRegression` is "
                                      "now `evaluation.general_regression` (keys in snake_case: system_prompt, "
                                      "max_score_drop, max_pass_rate_drop); rename it (docs/migrating.md)"))

    if "eval_cases" in data:
        cases = data.pop("eval_cases")
        converted = _eval_cases(cases, errors)
        if converted is not None:
            examples = data.get("examples", [])
            if not isinstance(examples, list):
                errors.append(SpecError("eval_cases", "cannot be merged: `examples` is not a list"))
            else:
                data["examples"] = list(examples) + converted
                warnings.append(SpecError("eval_cases", f"legacy key `eval_cases` is now part of `examples` "
                                          f"({len(converted)} appended); tt holds out ~20% of examples for evaluation "
                                          "by a deterministic split (docs/migrating.md)"))
    return data, warnings, errors


def _eval_cases(cases: Any, errors: list[SpecError]) -> list[dict[str, Any]] | None:
    if not isinstance(cases, list):
        errors.append(SpecError("eval_cases", "must be a list of {input, output} objects"))
        return None
    out = []
    for index, case in enumerate(cases):
        loc = f"eval_cases.{index}"
        if not isinstance(case, dict):
            errors.append(SpecError(loc, "must be an object {input, output}"))
            continue
        case = dict(case)
        if "expected_output" in case and "output" not in case:
            case["output"] = case.pop("expected_output")
        unknown = sorted(set(case) - {"input", "output"})
        if unknown:
            errors.append(SpecError(f"{loc}.{unknown[0]}", "unknown field (misspelled?); expected input and output"))
            continue
        out.append(case)
    return out if len(out) == len(cases) else None
