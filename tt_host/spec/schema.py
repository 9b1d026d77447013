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

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator


class StrictModel(BaseModel):
    """Base for every spec object: unknown keys are errors, values are not coerced silently."""

    model_config = ConfigDict(extra="forbid", strict=False, frozen=True)


class Example(StrictModel):
    input: str = Field(min_length=1, description="The user's message.")
    output: str = Field(min_length=1, description="The answer the model should give.")


class BehaviorSpec(StrictModel):
    """The fields every engine understands."""

    name: str = Field(min_length=1, max_length=200)
    description: str = ""
    system_prompt: str = ""
    guidelines: list[str] = Field(default_factory=list)
    constraints: list[str] = Field(default_factory=list)
    examples: list[Example] = Field(default_factory=list)
    engine: str = "adapter"

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
