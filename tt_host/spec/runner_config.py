"""`local-runner.json`, the Node CLI 0.13's runner settings: every key Node wrote takes effect or is accepted
with one warning saying what tt does instead; a misspelled key or a wrong value is an error naming the key.

Read beside the spec (or from `--config PATH`). A key whose setting tt has in the spec is applied to the spec
before it is validated (so the run's frozen spec.json, its fingerprints and report hold it) with one warning
saying where to move it; `paths.modelCache` is Hugging Face's `HF_HOME` (as in Node: `~` expanded, relative to
the config's folder) for this command and its stages; `dryRun: true` makes `tt run` a dry run;
`evaluation.timeoutMs` bounds each evaluation stage (tt_host.engines.runner stops a stage past it); a key that
names what tt always does (greedy decoding, exact-match scoring, a reused baseline) is accepted with that value;
`storeRoot`, `artifactRoot` and `evaluation.sampleSeed` are accepted with a warning saying where tt keeps
that instead (a shared config never chooses where tt writes). Nothing here writes to disk.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from tt_host.spec.errors import SpecError

CONFIG_NAME = "local-runner.json"

# Node key -> (kind, target, why). kind: "spec" (a spec field, dotted), "home" (HF_HOME), "same" (what tt always
# does is `target`: another value of its type is accepted with a warning saying so, another type is an error),
# "note" (accepted, not read: `why` says what tt does instead), "dry" (dryRun), "timeout" (evaluation.timeoutMs),
# "cache" (evaluation.baselineCache: false turns the cross-run baseline cache off, TT_NO_BASELINE_CACHE=1).
KEYS: dict[str, tuple[str, Any, str]] = {
    "storeRoot": ("note", None, "tt keeps models, the run index and activations in $TT_HOME (set TT_HOME to move "
                  "them), never where a config says"),
    "artifactRoot": ("note", None, "each run's artifacts stay in its run folder (.tuned-tensor/runs/ beside the spec, "
                     "or `tt run --resume DIR`); `tt models export ID DIR` copies a model out"),
    "dryRun": ("dry", None, ""),
    "paths.baseModel": ("spec", "base_model", ""),
    "paths.modelCache": ("home", "HF_HOME", ""),
    "evaluation.inference.maxNewTokens": ("spec", "hyperparameters.max_new_tokens", ""),
    "evaluation.inference.temperature": ("same", 0, "tt evaluates with greedy decoding (temperature 0)"),
    "evaluation.inference.topP": ("same", 1, "tt evaluates with greedy decoding (top_p 1)"),
    "evaluation.inference.device": ("spec", "device", ""),
    "evaluation.scoring.mode": ("same", "exact_match", "tt scores exact match and token F1 on every run "
                                "(docs/evaluation.md); JSON-field scoring is not in tt"),
    "evaluation.scoring.fields": ("note", None, "JSON-field scoring is not in tt; every run scores exact match "
                                  "and token F1 (docs/evaluation.md)"),
    "evaluation.timeoutMs": ("timeout", None, ""),
    "evaluation.maxExamples": ("spec", "hyperparameters.max_eval_examples", ""),
    "evaluation.sampleSeed": ("note", None, "the held-out examples are chosen by tt's deterministic split of the "
                              "spec (docs/migrating.md); hyperparameters.seed seeds training"),
    "evaluation.baselineCache": ("cache", True, "a finished baseline with the same inputs is reused from the "
                                 "cross-run cache (docs/evaluation.md)"),
    "evaluation.generalRegression": ("spec", "evaluation.general_regression", ""),
}
BLOCKS = {"paths", "evaluation", "evaluation.inference", "evaluation.scoring"}
CAMEL = {"systemPrompt": "system_prompt", "maxScoreDrop": "max_score_drop", "maxPassRateDrop": "max_pass_rate_drop"}
MIN_TIMEOUT_MS = 100  # Node's own minimum


@dataclass
class Applied:
    """What a config did: warnings, errors (each naming `<config>:<key>`), the environment it sets, whether it
    makes `tt run` a dry run, and the evaluation stages' time limit in seconds."""

    warnings: list[SpecError] = field(default_factory=list)
    errors: list[SpecError] = field(default_factory=list)
    environment: dict[str, str] = field(default_factory=dict)
    dry_run: bool = False
    eval_timeout: Optional[float] = None


def find(spec_path: Path, given: Optional[Path]) -> Optional[Path]:
    """The config to read: the given path, else local-runner.json beside the spec when there is anything by that
    name (a folder, FIFO or link to a device is then refused by the reader, never skipped and never opened)."""
    if given is not None:
        return Path(given).expanduser().absolute()
    beside = Path(spec_path).parent / CONFIG_NAME
    return beside if os.path.lexists(beside) else None


def _flatten(data: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out = []
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if dotted in BLOCKS and isinstance(value, dict):
            out += _flatten(value, dotted + ".")
        else:
            out.append((dotted, value))
    return out


def _get(data: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(data, dict) or part not in data:
            return None
        data = data[part]
    return data


def _blocking_parent(data: dict[str, Any], dotted: str) -> Optional[str]:
    """The dotted spec field on the way to `dotted` that holds something other than an object, if any."""
    parts = dotted.split(".")
    for depth in range(1, len(parts)):
        value = _get(data, ".".join(parts[:depth]))
        if value is not None and not isinstance(value, dict):
            return ".".join(parts[:depth])
    return None


def _set(data: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    for part in parents:
        data = data.setdefault(part, {})
    data[last] = value


def _bool(value: Any) -> bool:
    return isinstance(value, bool)


def _same_type(value: Any, target: Any) -> bool:
    """`value` is of `target`'s kind: a bool for a bool, a number (not a bool) for a number, a string for a string."""
    if _bool(target):
        return _bool(value)
    if isinstance(target, (int, float)):
        return isinstance(value, (int, float)) and not _bool(value)
    return isinstance(value, type(target))


def _home(value: Any, config_dir: Path) -> tuple[Optional[str], str]:
    """(HF_HOME, "") for a usable folder path, else (None, why)."""
    if not isinstance(value, str) or not value.strip():
        return None, "must be a folder path (Hugging Face's HF_HOME, e.g. \"~/.cache/huggingface\")"
    if "\x00" in value:
        return None, "holds a NUL character; give a folder path"
    return str((config_dir / Path(value).expanduser()).absolute()), ""


def apply(config: dict[str, Any], raw: dict[str, Any], spec_fields: set[str], where: str) -> Applied:
    """Apply `config` to the raw spec in place; what it did and refused."""
    out = Applied()
    for key, value in _flatten(config):
        loc, said = f"{where}:{key}", len(out.warnings)
        _one_key(out, loc, key, value, raw, spec_fields, where)
        for warning in out.warnings[said:]:  # a warning line names its file and key (an error's loc does)
            warning.msg = f"{Path(where).name} `{key}`: {warning.msg}"
    return out


def _one_key(out: Applied, loc: str, key: str, value: Any, raw: dict[str, Any], spec_fields: set[str],
             where: str) -> None:
    if key not in KEYS:
        out.errors.append(SpecError(loc, "unknown field (misspelled?); docs/migrating.md lists every "
                                    f"{CONFIG_NAME} key"))
        return
    kind, target, why = KEYS[key]
    if kind == "same":
        if not _same_type(value, target):
            out.errors.append(SpecError(loc, f"must be {type(target).__name__ if not _bool(target) else 'true or false'}"
                                             f" like {target!r} ({why})"))
        elif value != target:
            out.warnings.append(SpecError(loc, f"accepted, not read: {value!r} is not used, {why}; remove it"))
        else:
            out.warnings.append(SpecError(loc, f"accepted ({why}); remove it"))
    elif kind == "cache":
        if not _bool(value):
            out.errors.append(SpecError(loc, "must be true or false"))
        elif value:
            out.warnings.append(SpecError(loc, f"accepted ({why}); remove it"))
        else:
            out.environment["TT_NO_BASELINE_CACHE"] = "1"
            out.warnings.append(SpecError(loc, "false: this command's runs neither reuse nor keep cached baselines "
                                          "(TT_NO_BASELINE_CACHE=1; docs/evaluation.md)"))
    elif kind == "note":
        out.warnings.append(SpecError(loc, f"accepted, not read: {why} (docs/migrating.md)"))
    elif kind == "dry":
        if not _bool(value):
            out.errors.append(SpecError(loc, "must be true or false"))
        elif value:
            out.dry_run = True
            out.warnings.append(SpecError(loc, "true: `tt run` and `tt pipeline run` print what would run and "
                                          "create nothing (tt's dry run, docs/migrating.md); set it to false "
                                          "to train"))
        else:
            out.warnings.append(SpecError(loc, "accepted (false: `tt run` runs); remove it"))
    elif kind == "timeout":
        if not isinstance(value, int) or _bool(value) or value < MIN_TIMEOUT_MS:
            out.errors.append(SpecError(loc, f"must be a whole number of milliseconds, at least {MIN_TIMEOUT_MS}"))
            return
        out.eval_timeout = value / 1000
        out.warnings.append(SpecError(loc, f"each evaluation stage is stopped after {value} ms and the run fails "
                                      "(`tt run --resume DIR` runs it again); docs/migrating.md"))
    elif kind == "home":
        home, problem = _home(value, Path(where).parent)
        if home is None:
            out.errors.append(SpecError(loc, problem))
            return
        out.environment.update({"HF_HOME": home, "HF_HUB_CACHE": str(Path(home) / "hub")})
        out.warnings.append(SpecError(loc, f"sets HF_HOME={home} (models in {home}/hub) for this command and its "
                                      "stages; set HF_HOME yourself instead (docs/migrating.md)"))
    else:
        _apply_spec_key(out, loc, key, value, target, raw, spec_fields)


def _apply_spec_key(out: Applied, loc: str, key: str, value: Any, target: str, raw: dict[str, Any],
                    spec_fields: set[str]) -> None:
    if target.split(".")[0] not in spec_fields:
        out.errors.append(SpecError(loc, f"this engine's spec has no `{target}`; remove it"))
        return
    if key == "evaluation.generalRegression":
        if not isinstance(value, dict):
            out.errors.append(SpecError(loc, "must be an object {dataset, maxScoreDrop, maxPassRateDrop}"))
            return
        value = {CAMEL.get(k, k): v for k, v in value.items()}
    clash = _blocking_parent(raw, target)
    if clash is not None:
        out.errors.append(SpecError(loc, f"the spec's `{clash}` is not an object, so `{target}` cannot be set; fix "
                                    "the spec or remove the key"))
        return
    current = _get(raw, target)
    if current is not None and current != value:
        out.errors.append(SpecError(loc, f"conflicts with the spec's `{target}` ({current!r}); keep one, in "
                                    "the spec"))
        return
    _set(raw, target, value)
    out.warnings.append(SpecError(loc, f"sets the spec's `{target}` to {value!r}; move it into the spec "
                                  "(docs/migrating.md)"))


def take_effect(environment: dict[str, str]) -> None:
    """The environment a config sets, for this process and the stages it starts."""
    os.environ.update(environment)
