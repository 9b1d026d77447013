"""The neutral behavior spec, shared by every engine.

Every model is strict (`extra="forbid"`): an unknown or misspelled key is an
error naming its dotted path. Engines extend `BehaviorSpec` with their own
fields (see `tt_host.engine.Engine.spec_model`). Paths inside engine blocks are
resolved beside the spec file with `resolve_path` and the validation context
key `spec_dir`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator


class StrictModel(BaseModel):
    """Base for every spec object: unknown keys are errors, values are not coerced silently."""

    model_config = ConfigDict(extra="forbid", strict=False, frozen=True)


class Example(StrictModel):
    input: str = Field(min_length=1, description="The user's message.")
    output: str = Field(min_length=1, description="The answer the model should give.")


class GeneralRegression(StrictModel):
    """Policy and data of the general-regression gate (docs/evaluation.md)."""

    dataset: str = Field(min_length=1, description="Chat JSONL beside the spec.")
    system_prompt: Optional[str] = Field(None, min_length=1, description="Used for rows without a system message; "
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


class Evaluation(StrictModel):
    general_regression: Optional[GeneralRegression] = None


class BehaviorSpec(StrictModel):
    """The fields every engine understands."""

    name: str = Field(min_length=1, max_length=200)
    description: str = ""
    system_prompt: str = ""
    guidelines: list[str] = Field(default_factory=list)
    constraints: list[str] = Field(default_factory=list)
    examples: list[Example] = Field(default_factory=list)
    engine: str = "adapter"
    evaluation: Optional[Evaluation] = None

    @field_validator("guidelines", "constraints")
    @classmethod
    def _no_blank_items(cls, items: list[str]) -> list[str]:
        for index, item in enumerate(items):
            if not item.strip():
                raise ValueError(f"item {index} is blank")
        return items


def resolve_path(value: Optional[str | Path], info: ValidationInfo) -> Optional[Path]:
    """Resolve a spec path beside the spec file (validation context `spec_dir`)."""
    if value is None:
        return None
    path = Path(value).expanduser()
    if not path.is_absolute():
        context: dict[str, Any] = info.context or {}
        base = Path(context.get("spec_dir", "."))
        path = base / path
    return Path(_normalize(path))


def _normalize(path: Path) -> str:
    # Normalise ".." without following symbolic links, so a link can still be
    # detected and refused by the engine.
    import os

    return os.path.normpath(os.path.abspath(path))
