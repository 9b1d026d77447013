"""`local-runner.json`, the Node CLI 0.13's runner settings: every key takes effect or is refused by name.

Read beside the spec (or from `--config PATH`). A key whose setting tt has in the spec is applied to the spec
before it is validated (so the run's frozen spec.json, its fingerprints and report hold it) with one warning
saying where to move it; `paths.modelCache` sets the Hugging Face cache for this command and its stages; a key
that names what tt always does (greedy decoding, exact-match scoring, a reused baseline) is accepted with that
value; every other key or value is an error naming the key and where its setting lives now. A misspelled key
is an error too. Nothing here writes to disk.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

from tt_host.spec.errors import SpecError

CONFIG_NAME = "local-runner.json"

# Node key -> (kind, target, why). kind: "spec" (a spec field, dotted), "env" (an environment variable),
# "same" (accepted when equal to `target`), "refuse" (`why` says where the setting lives now).
KEYS: dict[str, tuple[str, Any, str]] = {
    "storeRoot": ("refuse", None, "tt's store is $TT_HOME (models, the run index, activations): set TT_HOME"),
    "artifactRoot": ("refuse", None, "artifacts live in their run folder (`tt run --resume DIR` chooses it); "
                     "`tt models export ID DIR` copies one out"),
    "dryRun": ("same", False, "`tt run --dry-run` and `tt pipeline plan` print what would run and create nothing; "
               "there is no training-free run"),
    "paths.baseModel": ("spec", "base_model", ""),
    "paths.modelCache": ("env", "HF_HUB_CACHE", ""),
    "evaluation.inference.maxNewTokens": ("spec", "hyperparameters.max_new_tokens", ""),
    "evaluation.inference.temperature": ("same", 0, "tt evaluates with greedy decoding (temperature 0)"),
    "evaluation.inference.topP": ("same", 1, "tt evaluates with greedy decoding (top_p 1)"),
    "evaluation.inference.device": ("spec", "device", ""),
    "evaluation.scoring.mode": ("same", "exact_match", "tt scores exact match and token F1 on every run "
                                "(docs/evaluation.md); JSON-field scoring is not in tt"),
    "evaluation.scoring.fields": ("refuse", None, "JSON-field scoring is not in tt; every run scores exact match "
                                  "and token F1 (docs/evaluation.md)"),
    "evaluation.timeoutMs": ("refuse", None, "tt puts no time limit on evaluation; stop a run with Ctrl-C and "
                             "`tt run --resume DIR` continues it"),
    "evaluation.maxExamples": ("spec", "hyperparameters.max_eval_examples", ""),
    "evaluation.sampleSeed": ("refuse", None, "the held-out examples are chosen by tt's deterministic split of the "
                              "spec (docs/migrating.md); hyperparameters.seed seeds training"),
    "evaluation.baselineCache": ("same", True, "a finished baseline with the same inputs is always reused; a new run "
                                 "folder evaluates it again"),
    "evaluation.generalRegression": ("spec", "evaluation.general_regression", ""),
}
BLOCKS = {"paths", "evaluation", "evaluation.inference", "evaluation.scoring"}
CAMEL = {"systemPrompt": "system_prompt", "maxScoreDrop": "max_score_drop", "maxPassRateDrop": "max_pass_rate_drop"}


def find(spec_path: Path, given: Optional[Path]) -> Optional[Path]:
    """The config to read: the given path, else local-runner.json beside the spec when there is one."""
    if given is not None:
        return Path(given).expanduser().absolute()
    beside = Path(spec_path).parent / CONFIG_NAME
    return beside if beside.is_file() else None


def _flatten(data: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out = []
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if dotted in BLOCKS and isinstance(value, dict):
            out += _flatten(value, dotted + ".")
        else:
            out.append((dotted, value))
    return out


def _get(data: dict[str, Any], dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(data, dict) or part not in data:
            return None
        data = data[part]
    return data


def _set(data: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    for part in parents:
        data = data.setdefault(part, {})
    data[last] = value


def apply(config: dict[str, Any], raw: dict[str, Any], spec_fields: set[str], where: str
          ) -> tuple[list[SpecError], list[SpecError], dict[str, str]]:
    """(warnings, errors, environment) for applying `config` to the raw spec in place."""
    warnings: list[SpecError] = []
    errors: list[SpecError] = []
    environment: dict[str, str] = {}
    for key, value in _flatten(config):
        loc = f"{where}:{key}"
        if key not in KEYS:
            errors.append(SpecError(loc, "unknown field (misspelled?); docs/migrating.md lists every "
                                    f"{CONFIG_NAME} key"))
            continue
        kind, target, why = KEYS[key]
        if kind == "refuse" or (kind == "same" and value != target):
            errors.append(SpecError(loc, f"not read by tt: {why}; remove it"))
        elif kind == "same":
            warnings.append(SpecError(loc, f"accepted ({why}); remove it"))
        elif kind == "env":
            if not isinstance(value, str) or not value:
                errors.append(SpecError(loc, "must be a folder path"))
                continue
            environment[target] = str((Path(where).parent / value).expanduser())
            warnings.append(SpecError(loc, f"sets {target}={environment[target]} for this command and its stages; "
                                      f"set {target} yourself instead (docs/migrating.md)"))
        else:
            if target.split(".")[0] not in spec_fields:
                errors.append(SpecError(loc, f"this engine's spec has no `{target}`; remove it"))
                continue
            if key == "evaluation.generalRegression" and isinstance(value, dict):
                value = {CAMEL.get(k, k): v for k, v in value.items()}
            current = _get(raw, target)
            if current is not None and current != value:
                errors.append(SpecError(loc, f"conflicts with the spec's `{target}` ({current!r}); keep one, in "
                                        "the spec"))
                continue
            _set(raw, target, value)
            warnings.append(SpecError(loc, f"sets the spec's `{target}` to {value!r}; move it into the spec "
                                      "(docs/migrating.md)"))
    return warnings, errors, environment


def take_effect(environment: dict[str, str]) -> None:
    """The environment a config sets, for this process and the stages it starts."""
    os.environ.update(environment)
