"""One declaration per engine setting: its type, default, bounds and help, read by both processes.

An engine declares each block of its spec (`hyperparameters`, `foundation`, ...) once, as a frozen
dataclass whose fields are made by `setting`, in a module both sides may import (the engine's
`formats/`). The stage side parses a request into that dataclass (`tt_stagekit.stageconfig`, which
reads the annotations and ignores the rest); the host side derives its strict spec model from the same
class (`tt_host.api.settings_model`), which turns the bounds and the help into the pydantic field's
constraints and description. So a setting is added, renamed or given another default in one line.

    @dataclass(frozen=True)
    class TrainSettings:
        steps: int = setting(100, ge=1, le=1_000_000, help="Optimizer steps.")
        learning_rate: Optional[float] = setting(None, gt=0, le=1)

Annotations are the stage's types. Where the spec spells a value in another form than the stage
receives it, an `Annotated` marker says so: `Text` (a string the host refuses when blank), `TextPath`
(written as such a string, resolved by the host, received as a `Path`) and `PathString` (a plain string
on the host, a `Path` on the stage). `tuple[X, ...]` is a JSON list on both sides. Stdlib only.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated, Any, Callable, Iterator, Optional

KEY = "tt_setting"  # the dataclass field's metadata key holding its `Setting`


@dataclasses.dataclass(frozen=True)
class Setting:
    """A setting's bounds and help (its name, type and default are the dataclass field's)."""

    ge: Optional[float] = None
    gt: Optional[float] = None
    le: Optional[float] = None
    lt: Optional[float] = None
    min_length: Optional[int] = None
    max_length: Optional[int] = None
    help: Optional[str] = None
    validate_default: bool = False  # the host's rules check the default too (it depends on other settings)

    def bounds(self) -> dict[str, Any]:
        """The bounds that are set, by name (ge, gt, le, lt, min_length, max_length)."""
        names = ("ge", "gt", "le", "lt", "min_length", "max_length")
        return {name: getattr(self, name) for name in names if getattr(self, name) is not None}


def setting(default: Any = dataclasses.MISSING, *, default_factory: Callable[[], Any] | Any = dataclasses.MISSING,
            ge: Optional[float] = None, gt: Optional[float] = None, le: Optional[float] = None,
            lt: Optional[float] = None, min_length: Optional[int] = None, max_length: Optional[int] = None,
            help: Optional[str] = None, validate_default: bool = False) -> Any:
    """A dataclass field declaring one setting: its default (none: the setting is required), bounds and help."""
    meta = Setting(ge=ge, gt=gt, le=le, lt=lt, min_length=min_length, max_length=max_length, help=help,
                   validate_default=validate_default)
    return dataclasses.field(default=default, default_factory=default_factory, metadata={KEY: meta})


def declaration(field: dataclasses.Field) -> Setting:
    """The `Setting` of a dataclass field (an empty one for a field made without `setting`)."""
    return field.metadata.get(KEY) or Setting()


def declared(cls: type) -> Iterator[tuple[dataclasses.Field, Setting]]:
    """Every field of the settings dataclass `cls` with its `Setting`, in declaration order."""
    for field in dataclasses.fields(cls):
        yield field, declaration(field)


def default_of(field: dataclasses.Field) -> Any:
    """The field's default (its factory called), or dataclasses.MISSING for a required setting."""
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return field.default_factory()  # type: ignore[misc]
    return dataclasses.MISSING


@dataclasses.dataclass(frozen=True)
class Spelled:
    """An `Annotated` marker: how the spec spells a value (`Spelled("text")`, `Spelled("string")`)."""

    form: str


TEXT = Spelled("text")
STRING = Spelled("string")

Text = Annotated[str, TEXT]  # a string that must carry content: the host refuses a blank one
TextPath = Annotated[Path, TEXT]  # the spec's non-blank string, resolved by the host; the stage gets a Path
PathString = Annotated[Path, STRING]  # the spec's string (checked by the host's validators); the stage gets a Path
