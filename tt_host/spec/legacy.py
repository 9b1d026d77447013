"""Specs written for the Node `tt` CLI (0.13): legacy keys mapped to today's, with one warning each.

Only these keys are translated; any other unknown key stays an error
(the strict schema refuses it), so a misspelling keeps failing:

- `id`                                -> `name` when the spec has no `name`; beside a `name` (Node's
                                         `tt init` writes both: a UUID `id`) it is kept as the spec's
                                         recorded identity (`spec_id` in run.json and the model entry)
- a hub `base_model` without `base_model_revision`
                                      -> `main`, which prefetch resolves to a commit and records; the
                                         warning prints the line that pins it (the cached commit when the
                                         Hugging Face cache has it)
- `file://` URIs in `dataset_prebuilt` / `datasets` paths
                                      -> the plain path
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
change and its reason. Nothing here writes to the disk (the pin line reads the Hugging Face cache).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional
from urllib.parse import unquote, urlparse

from tt_host.spec import hub_cache
from tt_host.spec.errors import SpecError

PREBUILT_FORMATS = ("chat", "chat-jsonl", "chat_jsonl", "jsonl", "messages")
CAMEL_GATE_KEYS = {"systemPrompt": "system_prompt", "maxScoreDrop": "max_score_drop",
                   "maxPassRateDrop": "max_pass_rate_drop"}
PREBUILT_SPLITS = {"training": "train", "train": "train", "validation": "validation", "test": "test"}


@dataclass
class Migration:
    """A raw spec in today's shape: `data`, one warning per legacy item, errors, and the Node `id` kept as
    the spec's recorded identity (None when the spec had none, or it became the `name`)."""

    data: dict[str, Any]
    warnings: list[SpecError] = field(default_factory=list)
    errors: list[SpecError] = field(default_factory=list)
    spec_id: Optional[str] = None


def migrate(raw: dict[str, Any], spec_fields: set[str], spec_dir: Optional[Path] = None) -> Migration:
    """Today's spec for a raw one; `spec_fields` are the engine spec's top-level keys, `spec_dir` its folder."""
    data = copy.deepcopy(raw)
    warnings: list[SpecError] = []
    errors: list[SpecError] = []
    result = Migration(data, warnings, errors)

    def move(old: str, new: str, value: Any, note: str = "") -> None:
        if new in data and data[new] != value:
            errors.append(SpecError(old, f"legacy key `{old}` conflicts with `{new}` (different values); keep only `{new}`"))
            return
        data[new] = value
        warnings.append(SpecError(old, f"legacy key `{old}` is now `{new}`{note}; rename it (docs/migrating.md)"))

    if "id" in data and "name" in data:
        result.spec_id = _kept_id(data.pop("id"), data["name"], warnings, errors)
    elif "id" in data:
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

    if isinstance(data.get("datasets"), dict):
        data["datasets"] = _file_uris(data["datasets"], "datasets", warnings, errors)
    _pin_hub_revision(data, spec_fields, spec_dir, warnings)

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
    return result


def _kept_id(value: Any, name: Any, warnings: list[SpecError], errors: list[SpecError]) -> Optional[str]:
    """Node's `id` beside `name`: a string kept as the recorded identity (the `name` still names the spec)."""
    if not isinstance(value, str) or not value.strip() or len(value) > 200:
        errors.append(SpecError("id", "must be a non-empty string of at most 200 characters (Node's spec id); "
                                "or remove it"))
        return None
    if value == name:
        warnings.append(SpecError("id", "legacy key `id` repeats `name`; remove it (docs/migrating.md)"))
        return None
    warnings.append(SpecError("id", f"legacy key `id` ({value}) is kept as the spec's recorded identity "
                              "(`spec_id` in run.json and the model entry); `name` names runs and models. Remove "
                              "it when nothing needs Node's id (docs/migrating.md)"))
    return value


def _file_uris(block: dict[str, Any], loc: str, warnings: list[SpecError], errors: list[SpecError]) -> dict[str, Any]:
    """`file://` URIs (Node wrote them) in a datasets block, as plain paths; one warning each."""
    out = dict(block)
    for key, value in block.items():
        where = f"{loc}.{key}"
        if isinstance(value, dict) and isinstance(value.get("path"), str):
            value, where = value["path"], f"{where}.path"
            target = out[key] = dict(out[key])
        elif isinstance(value, str):
            target = None
        else:
            continue
        if not value.startswith("file:"):
            continue
        uri = urlparse(value)
        if uri.netloc not in ("", "localhost") or not uri.path:
            errors.append(SpecError(where, f"{value!r}: only a local file:// URI (file:///abs/path) is read; "
                                    "write the path itself"))
            continue
        path = unquote(uri.path)
        if target is None:
            out[key] = path
        else:
            target["path"] = path
        warnings.append(SpecError(where, f"the file:// URI is read as the path {path}; write the path itself "
                                  "(docs/migrating.md)"))
    return out


def _pin_hub_revision(data: dict[str, Any], spec_fields: set[str], spec_dir: Optional[Path],
                      warnings: list[SpecError]) -> None:
    """A hub `base_model` with no revision (Node prefetched and pinned it itself): `main`, resolved by prefetch."""
    base = data.get("base_model")
    if "base_model_revision" not in spec_fields or data.get("base_model_revision") is not None:
        return
    if not isinstance(base, str) or not hub_cache.HUB_ID.match(base.strip()):
        return
    if spec_dir is not None and (spec_dir / base.strip()).exists():
        return  # a local folder of that name: the engine reads it as a folder
    base = base.strip()
    data["base_model_revision"] = "main"
    commit = hub_cache.cached_commit(base, "main")
    if commit:
        pin = f"add `{json.dumps('base_model_revision')}: {json.dumps(commit)},` to pin it (the cached `main`)"
    else:
        pin = (f"`tt models prefetch {base}` downloads it and prints the `\"base_model_revision\": ...` line "
               "that pins it")
    warnings.append(SpecError("base_model_revision", f"hub model {base!r} has no revision: tt uses `main`, which "
                              f"prefetch resolves to a commit and records in the run; {pin} (docs/migrating.md)"))


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
