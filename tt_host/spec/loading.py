"""Reading a spec file and validating it against its engine's schema.

Errors are collected, never raised one at a time: each has a dotted `loc`
(`hyperparameters.batch_size`, `examples.3.input`) and a message, so `tt validate --json`
can show them all; a field still holding a `tt init` placeholder is one. A
duplicated key is an error at its dotted path; a value of the wrong type is
refused, never converted (the models are strict: `"4"`, `4.0` and `true` are
not integers, infinities and NaN are not numbers).
Nothing here writes to disk.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

from pydantic import ValidationError

from tt_host.engine import Engine, benchmarks_both_sides, evaluates_both_sides
from tt_host.plugins import Plugins, UnknownEngineError
from tt_host.spec import runner_config
from tt_host.spec.errors import SpecError
from tt_host.spec.general import example_overlap
from tt_host.spec.compiler import CompiledSpec, DuplicatePromptError, compile_spec
from tt_host.spec.placeholders import find_placeholders, node_locs, node_placeholders
from tt_host.spec.schema import DEFAULT_ENGINE, BehaviorSpec
from tt_host.spec.suggest import fields_at
from tt_host.errors import did_you_mean
from tt_stagekit.graders import GraderError
from tt_stagekit.userinput import MAX_SPEC_BYTES, InputFileError, JSONInputError, loads, os_reason, read_regular


@dataclass
class LoadedSpec:
    path: Path
    raw: Optional[dict[str, Any]] = None
    engine_name: Optional[str] = None
    engine: Optional[Engine] = None
    spec: Optional[BehaviorSpec] = None
    compiled: Optional[CompiledSpec] = None
    errors: list[SpecError] = field(default_factory=list)
    warnings: list[SpecError] = field(default_factory=list)  # legacy keys mapped (tt_host.spec.legacy)
    spec_id: Optional[str] = None  # a Node spec's `id` beside its `name`, recorded with runs and models
    config: Optional[Path] = None  # the local-runner.json applied (tt_host.spec.runner_config)
    dry_run: bool = False  # the config's `dryRun: true`: `tt run` previews and creates nothing
    eval_timeout: Optional[float] = None  # the config's evaluation.timeoutMs, in seconds, per evaluation stage
    overrides: list[str] = field(default_factory=list)  # the `--set KEY=VALUE` arguments applied (tt_host.spec.overrides)
    grader_check: Optional[Any] = None  # tt_host.spec.graders.GraderCheck: the spec's graders, checked on its outputs
    sweep: Optional[Any] = None  # the spec's `sweep` block as read (tt sweep's; `tt run` ignores it: tt_host.sweeps)
    register_models: bool = True  # False for a sweep's trials: only the winner's run registers (tt_host.sweeps)

    @property
    def graders(self):
        """The spec's graders (tt_stagekit.graders.GraderSet), or None before they were checked."""
        return self.grader_check.graders if self.grader_check is not None else None

    @property
    def valid(self) -> bool:
        return not self.errors and self.spec is not None


def _dotted(loc: tuple[Any, ...]) -> str:
    return ".".join(str(part) for part in loc) or "(spec)"


def read_json(path: Path) -> tuple[Optional[dict[str, Any]], list[SpecError]]:
    """The spec's JSON object. Refused, as one `(file)` error (or one naming the key): a missing file, a
    folder, FIFO or device (never opened, so never a hang), text that is not UTF-8, invalid JSON, a
    duplicated key, an integer thousands of digits long, nesting deeper than userinput.MAX_DEPTH."""
    try:
        raw = read_regular(path, MAX_SPEC_BYTES)
    except InputFileError as exc:
        hint = "; create one with `tt init DIR`" if exc.missing else ""
        return None, [SpecError("(file)", f"{exc}{hint}")]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        return None, [SpecError("(file)", f"{path}:{line}: not UTF-8 (undecodable byte at offset {exc.start}); "
                                          "save the spec as UTF-8")]
    try:
        data = loads(text)
    except JSONInputError as exc:
        if exc.line is not None:
            return None, [SpecError("(file)", f"{path}:{exc.line}:{exc.col}: {exc}")]
        return None, [SpecError(exc.loc or "(file)", f"{path}: {exc}")]
    if not isinstance(data, dict):
        return None, [SpecError("(file)", f"{path}: the spec must be a JSON object")]
    return data, []


def _apply_config(loaded: LoadedSpec, config: Optional[Path], fields: set[str]) -> list[SpecError]:
    """A local-runner.json applied to `loaded.raw` (a copy); its warnings, its errors added to `loaded.errors`."""
    if config is None:
        return []
    loaded.config = config
    if "\x00" in str(config):
        loaded.errors.append(SpecError("--config", "the path holds a NUL character; give the config's path"))
        return []
    data, errors = read_json(config)
    if data is None:
        loaded.errors += [SpecError(f"{config.name}", e.msg) for e in errors]
        return []
    loaded.raw = copy.deepcopy(loaded.raw)
    applied = runner_config.apply(data, loaded.raw, fields, str(config))
    loaded.errors += applied.errors
    if not applied.errors:
        runner_config.take_effect(applied.environment)
        loaded.dry_run, loaded.eval_timeout = applied.dry_run, applied.eval_timeout
    return applied.warnings


def load_spec(path: Path, plugins: Plugins, require_examples: bool = True, config: Optional[Path] = None,
              overrides: Sequence[str] = ()) -> LoadedSpec:
    """Read, validate and compile a spec; every problem lands in `errors`. `config`: a Node `local-runner.json`
    (default: the one beside the spec, when there is one; tt_host.spec.runner_config). `overrides`: `--set
    KEY=VALUE` arguments, applied to the spec as read (tt_host.spec.overrides); an error at a field one set
    names it."""
    from tt_host.spec import overrides as setting

    path = Path(path).expanduser().absolute()
    parsed, errors = setting.parse(overrides)
    if errors:
        return LoadedSpec(path=path, errors=errors)
    loaded = _load(path, plugins, require_examples, config, parsed)
    loaded.errors = setting.named(loaded.errors, parsed)
    loaded.overrides = [o.argument for o in parsed]
    return loaded


def _load(path: Path, plugins: Plugins, require_examples: bool, config: Optional[Path], parsed: list) -> LoadedSpec:
    from tt_host.spec import overrides as setting

    loaded = LoadedSpec(path=path)
    loaded.raw, loaded.errors = read_json(path)
    if loaded.raw is None:
        return loaded
    loaded.raw, loaded.errors = setting.apply(loaded.raw, parsed)
    if loaded.errors:
        return loaded
    if "sweep" in loaded.raw:  # tt sweep's block, never part of the spec a run validates, freezes or fingerprints
        loaded.raw = dict(loaded.raw)
        loaded.sweep = loaded.raw.pop("sweep")
    engine_name = loaded.raw.get("engine", DEFAULT_ENGINE)
    if not isinstance(engine_name, str):
        loaded.errors.append(SpecError("engine", "must be a string naming an installed engine"))
        return loaded
    loaded.engine_name = engine_name
    try:
        loaded.engine = plugins.engine(engine_name)
    except UnknownEngineError as exc:
        loaded.errors.append(SpecError("engine", str(exc)))
        return loaded
    from tt_host.spec.legacy import migrate

    fields = set(loaded.engine.spec_model.model_fields)
    config_warnings = _apply_config(loaded, runner_config.find(path, config), fields)
    if loaded.errors:
        return loaded
    migration = migrate(loaded.raw, fields, path.parent)
    data, loaded.warnings, loaded.errors, loaded.spec_id = (migration.data, config_warnings + migration.warnings,
                                                            migration.errors, migration.spec_id)
    if loaded.errors:
        return loaded
    placeholders = dict(find_placeholders(data, loaded.engine))
    placeholders.update(node_placeholders(data))
    for loc, text in placeholders.items():
        which = "Node CLI's `tt init` scaffold text" if loc in node_locs(placeholders, data) else "`tt init` placeholder"
        loaded.errors.append(SpecError(loc, f"still holds the {which} {text!r}; edit the spec: replace it with your "
                                            "own value"))
    try:
        loaded.spec = loaded.engine.spec_model.model_validate(data, context={"spec_dir": str(path.parent)})
    except ValidationError as exc:
        for error in exc.errors():
            loc = _dotted(error["loc"])
            cause = (error.get("ctx") or {}).get("error")
            if isinstance(cause, GraderError):  # a grader entry names its own field (evaluation.graders.1.pattern)
                loc = cause.field
            if any(loc == p or loc.startswith(p + ".") for p in placeholders):
                continue  # the placeholder error already names this field
            message = cause.message if isinstance(cause, GraderError) else error["msg"]
            if error["type"] == "extra_forbidden":
                meant = did_you_mean(str(error["loc"][-1]), fields_at(loaded.engine.spec_model, error["loc"]))
                message = "unknown field (misspelled?); " + (f"did you mean {meant!r}?" if meant else
                                                             "remove it or check the spelling")
            loaded.errors.append(SpecError(loc, message))
        return loaded
    except OSError as exc:  # a check touched the disk and the OS refused; the net under the fields' own checks
        loaded.errors.append(SpecError("(spec)", f"cannot read {exc.filename or 'a path the spec names'}: "
                                                 f"{os_reason(exc)}"))
        return loaded
    if require_examples and len(loaded.spec.examples) < loaded.engine.min_examples:
        loaded.errors.append(
            SpecError(
                "examples",
                f"a run needs at least {loaded.engine.min_examples} examples, found {len(loaded.spec.examples)}",
            )
        )
    # the stages this spec runs: an engine's opt-in baseline stage that the spec leaves off answers nothing
    running = [stage for stage in loaded.engine.stages if stage.enabled(loaded.spec)]
    if loaded.spec.evaluation and loaded.spec.evaluation.general_regression:
        if not evaluates_both_sides(running):
            loaded.errors.append(SpecError("evaluation.general_regression", (
                f"the {engine_name} engine runs no baseline and candidate evaluation stages for this spec to "
                "answer a general-regression set (docs/evaluation.md); turn its baseline stage on or remove the "
                "block")))
        general = loaded.spec.evaluation.general_regression.load()
        if overlap := example_overlap(general, (e.input for e in loaded.spec.examples)):
            loaded.errors.append(SpecError("evaluation.general_regression.dataset", overlap))
    if loaded.spec.evaluation and loaded.spec.evaluation.benchmarks:
        if not benchmarks_both_sides(running):
            loaded.errors.append(SpecError("evaluation.benchmarks", (
                f"the {engine_name} engine has no baseline and candidate stages that run lm-eval benchmarks "
                "(docs/evaluation.md); remove the block")))
    try:
        loaded.compiled = compile_spec(loaded.spec)
    except DuplicatePromptError as exc:
        loaded.errors.append(SpecError(f"examples.{exc.second}.input", str(exc)))
        return loaded
    if require_examples and (problem := _nothing_held_out(loaded, running)):
        loaded.errors.append(problem)
    from tt_host.spec import graders

    loaded.grader_check = graders.check(loaded.spec)
    loaded.errors += loaded.grader_check.errors
    return loaded


def _nothing_held_out(loaded: LoadedSpec, running: list) -> Optional[SpecError]:
    """An error when the spec's run would evaluate nothing: the engine evaluates, but the split holds out no
    example (fewer than 2) and there is no prebuilt `datasets.test` (a held-out file an engine's spec may take)."""
    if not any(stage.evaluates for stage in running) or loaded.compiled.eval_rows:
        return None
    datasets = getattr(loaded.spec, "datasets", None)
    if datasets is not None and getattr(datasets, "test", None):
        return None
    count = len(loaded.spec.examples)
    where = "datasets.test" if datasets is not None else "examples"
    test = " or a prebuilt `datasets.test` file (held out, never trained on)" if "datasets" in type(
        loaded.spec).model_fields else ""
    return SpecError(where, f"nothing would be evaluated: {count} example(s) and no held-out set; add at least 2 "
                            f"examples (tt holds out a share of them for evaluation){test}")
