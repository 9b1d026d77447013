"""The neutral behavior spec, shared by every engine.

Every model is strict (`extra="forbid"`, `strict=True`, finite numbers only):
an unknown or misspelled key, or a value of the wrong type, is an error naming
its dotted path. Engines extend `BehaviorSpec` with their own
fields (see `tt_host.engine.Engine.spec_model`). Paths inside engine blocks are
resolved beside the spec file with `resolve_path` and the validation context
key `spec_dir`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, ClassVar, Optional, Union

from pydantic import (Field, StrictBool, StrictFloat, StrictInt, StrictStr, StringConstraints,
                      ValidationInfo, field_validator, model_validator)

from tt_host.spec.strict import Name, StrictModel, Text  # noqa: F401  (engines import them from here)
from tt_host.spec.synthesis import Synthesis
from tt_host.spec.settings import settings_model
from tt_stagekit import launcher
from tt_stagekit.launcher import endpoint_error, nodes_error


class DistributedSettings(settings_model(launcher.DistributedSettings)):
    """The torchrun settings of an engine block whose training stages can run distributed (docs/distributed.md).

    An engine's block inherits the four fields (the same names, bounds and defaults in every engine; the launcher,
    `tt_stagekit.launcher.stage_arguments`, reads them) and the checks between them: a malformed
    `rdzv_endpoint`, `nnodes > 1` without one, `node_rank >= nnodes`. `spec_path` is the block's dotted place in
    the spec, which the errors name (`hyperparameters.node_rank (2) must be smaller than hyperparameters.nnodes
    (2)`). Rules that depend on the engine (how its batch splits across processes, the devices it runs on)
    stay in the engine's block. The stage side of the same fields is `tt_stagekit.launcher.DistributedSettings`.
    """

    # The four fields are declared once, in tt_stagekit.launcher.DistributedSettings (settings_model derives them;
    # the docstring above is the JSON schema's description, kept as it was).
    spec_path: ClassVar[str] = ""

    @property
    def world_size(self) -> int:
        """How many processes train: nproc_per_node × nnodes."""
        return self.nproc_per_node * self.nnodes

    @field_validator("rdzv_endpoint")
    @classmethod
    def _endpoint(cls, value: Optional[str]) -> Optional[str]:
        if value is not None and (error := endpoint_error(value)):
            raise ValueError(error)
        return value.strip() if value is not None else None

    @model_validator(mode="after")
    def _nodes(self) -> "DistributedSettings":
        if error := nodes_error(f"{self.spec_path}." if self.spec_path else "", self.nnodes, self.node_rank,
                                self.rdzv_endpoint):
            raise ValueError(error)
        return self


class Example(StrictModel):
    input: Text = Field(min_length=1, description="The user's message.")
    output: Text = Field(min_length=1, description="The answer the model should give.")


class GeneralRegression(StrictModel):
    """Policy and data of the general-regression gate (docs/evaluation.md)."""

    dataset: Text = Field(min_length=1, description="Chat JSONL beside the spec.")
    system_prompt: Optional[Text] = Field(None, min_length=1, description="Used for rows without a system message; "
                                         "must equal any embedded one.")
    max_score_drop: float = Field(0.03, ge=0, le=1, description="Largest allowed drop of the mean token F1.")
    max_pass_rate_drop: float = Field(0.05, ge=0, le=1, description="Largest allowed drop of the exact-match rate.")

    @field_validator("dataset")
    @classmethod
    def _resolve(cls, value: str, info: ValidationInfo) -> str:
        return str(resolve_path(value, info))

    @model_validator(mode="after")
    def _readable(self) -> "GeneralRegression":
        self.load()  # a bad row raises GeneralSetError (a ValueError) naming file:line
        return self

    def load(self):
        """The checked dataset (tt_host.spec.general.GeneralSet)."""
        from tt_host.spec.general import read_general_set

        return read_general_set(Path(self.dataset), self.system_prompt)

    def data_inputs(self) -> dict[str, Any]:
        """What the evaluations depend on (not the policy): the dataset content and the system prompt."""
        data = self.load()
        return {"dataset_sha256": data.sha256, "system_prompt": self.system_prompt}


class BenchmarkTask(StrictModel):
    """One lm-evaluation-harness task of `evaluation.benchmarks` and its gate limit (docs/evaluation.md)."""

    task: str = Field(min_length=1, max_length=4096, description="An lm-eval task name (needs the hub when its data "
                      "is not cached), or a local task file (.yaml/.yml beside the spec, in a folder of its own).")
    metric: Optional[str] = Field(None, min_length=1, max_length=200, description="The metric the gate compares "
                                  "(default: the first the task reports, e.g. acc).")
    max_drop: float = Field(0.02, ge=0, le=1, description="Largest allowed drop of the metric from baseline to "
                            "candidate.")

    @field_validator("task")
    @classmethod
    def _local_file(cls, value: str, info: ValidationInfo) -> str:
        if not value.endswith((".yaml", ".yml")):
            return value
        from tt_host.spec.benchmarks import check_task_file

        return str(check_task_file(resolve_path(value, info), _spec_dir(info)))


class Benchmarks(StrictModel):
    """lm-evaluation-harness tasks run on the baseline and the candidate (docs/evaluation.md)."""

    tasks: list[BenchmarkTask] = Field(min_length=1, max_length=64)
    limit: Optional[int] = Field(None, ge=1, le=1_000_000, description="At most this many documents per task.")
    num_fewshot: int = Field(0, ge=0, le=64, description="Few-shot examples before each document.")

    @field_validator("tasks")
    @classmethod
    def _distinct(cls, tasks: list[BenchmarkTask]) -> list[BenchmarkTask]:
        seen = [t.task for t in tasks]
        for index, name in enumerate(seen):
            if name in seen[:index]:
                raise ValueError(f"item {index}: task {name!r} is listed twice")
        return tasks

    def data_inputs(self) -> dict[str, Any]:
        """What the benchmark scores depend on (not the policy: metric and max_drop only re-write the report)."""
        from tt_host.spec.benchmarks import task_digest

        return {"tasks": [{"task": t.task, "sha256": task_digest(t.task)} for t in self.tasks],
                "limit": self.limit, "num_fewshot": self.num_fewshot}


class Evaluation(StrictModel):
    general_regression: Optional[GeneralRegression] = None
    split_salt: Optional[Text] = Field(None, min_length=1, max_length=200, description=(
        "Salt of the held-out split (tt_host.spec.split); defaults to the spec's name. Set it to the old name "
        "when renaming a spec to keep its held-out set."))
    benchmarks: Optional[Benchmarks] = None
    graders: Optional[list[dict[str, Any]]] = Field(None, description=(
        "How an answer is scored against its reference (docs/evaluation.md, Graders): objects with a `kind` "
        "and its settings; left out, they are derived from the examples' outputs."))

    @field_validator("graders")
    @classmethod
    def _graders(cls, value: Optional[list[dict[str, Any]]]) -> Optional[list[dict[str, Any]]]:
        if value is not None:
            from tt_stagekit.graders import build_entries

            build_entries(value)  # a GraderError (a ValueError) names the entry's field; tt_host.spec.loading
        return value


ObserverName = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_-]{0,63}$")]
SettingName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")]

# The engine a spec without an `engine` field is for: the one place tt_host names an engine.
DEFAULT_ENGINE = "adapter"


class BehaviorSpec(StrictModel):
    """The fields every engine understands."""

    name: Name = Field(min_length=1, max_length=200)
    description: str = ""
    system_prompt: str = ""
    guidelines: list[str] = Field(default_factory=list)
    constraints: list[str] = Field(default_factory=list)
    examples: list[Example] = Field(default_factory=list)
    engine: str = DEFAULT_ENGINE
    evaluation: Optional[Evaluation] = None
    synthesis: Optional[Synthesis] = None  # rows grown by a teacher model (docs/synthesis.md)
    # Observer plugins this run enables, with their settings (docs/plugins.md, "Trackers"): tracking only,
    # never a stage input, so adding or changing one never re-runs a stage.
    observers: dict[ObserverName, dict[SettingName, Union[StrictBool, StrictInt, StrictFloat, StrictStr]]] = Field(
        default_factory=dict)

    @field_validator("guidelines", "constraints")
    @classmethod
    def _no_blank_items(cls, items: list[str]) -> list[str]:
        for index, item in enumerate(items):
            if not item.strip():
                raise ValueError(f"item {index} is blank")
        return items


def resolve_path(value: Optional[str | Path], info: ValidationInfo) -> Optional[Path]:
    """Resolve a spec path beside the spec file (validation context `spec_dir`).

    A name the filesystem cannot hold (a part over NAME_MAX, the whole over PATH_MAX) is a ValueError, so
    the error names the field instead of an OSError escaping from the first check that touches the disk.
    """
    if value is None:
        return None
    path = Path(value).expanduser()
    if not path.is_absolute():
        path = _spec_dir(info) / path
    resolved = Path(_normalize(path))
    _check_name_lengths(resolved)
    return resolved


def symlink_in(path: Path, info: ValidationInfo) -> Optional[Path]:
    """The first symbolic link among a resolved spec path's folders and itself, or None.

    Checked are the parts below the spec's folder when the path lies inside it
    (`data/link/corpus.txt` beside the spec), otherwise every part from the
    root: a link anywhere in the path the user wrote is found, not only at its end.
    """
    base = Path(_normalize(_spec_dir(info)))
    start = len(base.parts) + 1 if path.is_relative_to(base) and path != base else 2
    for end in range(start, len(path.parts) + 1):
        part = Path(*path.parts[:end])
        if os.path.islink(part):
            return part
    return None


def _spec_dir(info: ValidationInfo) -> Path:
    context: dict[str, Any] = info.context or {}
    return Path(context.get("spec_dir", "."))


def _check_name_lengths(path: Path) -> None:
    try:
        name_max = os.pathconf("/", "PC_NAME_MAX")
    except (OSError, ValueError):
        name_max = 255
    for part in path.parts:
        if len(os.fsencode(part)) > name_max:
            raise ValueError(f"the name {part[:40]!r}... ({len(os.fsencode(part))} bytes) is too long for the "
                             f"filesystem (at most {name_max}); shorten it")
    if len(os.fsencode(str(path))) >= 4096:
        raise ValueError("the path is too long for the filesystem (4096 bytes or more); shorten it")


def _normalize(path: Path) -> str:
    # Normalise ".." without following symbolic links, so a link can still be
    # detected and refused by the engine.
    return os.path.normpath(os.path.abspath(path))
