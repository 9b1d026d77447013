"""Typed stage configuration: a stage request parsed once, at stage start, into frozen dataclasses.

The host validates the spec with its strict model and sends it as JSON; the typed
spec would be lost at the process boundary if stages read it back as a string-keyed
dict. Each engine declares frozen dataclasses whose field names are the spec's key
names (the way nanochat's `GPTConfig` declares a model: typed fields, defaults
beside them) and `parse` builds them, checking every value against its annotation.
A wrong value is refused with the dotted field name, what was expected and what
came (`InvalidInput`, exit 2), before the stage does any work.

Supported annotations: `int` (not bool), `float` (an int is widened), `bool`,
`str`, `Path` (from a string), `Any`, `Literal[...]`, `Optional[X]`, `Union[...]`,
`tuple[X, ...]` (from a JSON list), `dict[str, X]` (a plain dict, e.g. rows that
are written back as JSON), `Mapping[str, X]` (read-only) and nested dataclasses. A key the dataclass does not declare is
refused (the host and the engine's runtime would be out of step), unless the
class sets `extra_keys = "ignore"` (a `ClassVar`), as the request's `spec` does
for the engine-neutral fields a stage never reads. Stdlib only.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import types
import typing
from pathlib import Path
from typing import Any, ClassVar, Literal, Mapping, TypeVar, Union

from tt_stagekit.contract import EarlierStage, InvalidInput, StageRequest  # noqa: F401 (StageRequest, EarlierStage: re-exported)

T = TypeVar("T")

_MISSING = dataclasses.MISSING


def parse(cls: type[T], data: Any, where: str = "") -> T:
    """An instance of the frozen dataclass `cls` built from the JSON value `data`; `where` prefixes field names."""
    if not isinstance(data, Mapping):
        raise InvalidInput(_wrong(where or cls.__name__, "an object", data))
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    if getattr(cls, "extra_keys", "forbid") != "ignore":
        unknown = sorted(str(k) for k in data if k not in fields)
        if unknown:
            raise InvalidInput(
                f"{_join(where, unknown[0])}: unknown to this engine's runtime; the spec was validated by "
                "another version of the engine than the one in its environment: run `tt engines prepare` again"
            )
    values = {}
    for name, field in fields.items():
        if not field.init:
            continue
        path = _join(where, name)
        if name in data:
            values[name] = convert(hints[name], data[name], path)
        elif field.default is _MISSING and field.default_factory is _MISSING:  # type: ignore[misc]
            raise InvalidInput(f"{path}: missing from the stage request")
    return cls(**values)


def convert(annotation: Any, value: Any, where: str) -> Any:
    """`value` checked (and where needed converted) against `annotation`; InvalidInput names `where`."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if annotation is Any:
        return value
    if dataclasses.is_dataclass(annotation):
        return parse(annotation, value, where)
    if origin is Union or origin is types.UnionType:
        if value is None and type(None) in args:
            return None
        errors = []
        for option in (a for a in args if a is not type(None)):
            try:
                return convert(option, value, where)
            except InvalidInput as exc:
                errors.append(str(exc))
        nested = [e for e in errors if e.startswith((f"{where}.", f"{where}["))]
        if len(errors) == 1 or nested:  # the value had the shape of one option: its own error says most
            raise InvalidInput((nested or errors)[0])
        raise InvalidInput(_wrong(where, " or ".join(_describe(a) for a in args), value))
    if origin is Literal:
        if any(value == a and type(value) is type(a) for a in args):
            return value
        raise InvalidInput(_wrong(where, "one of " + ", ".join(repr(a) for a in args), value))
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise InvalidInput(_wrong(where, "a list", value))
        item = args[0] if args else Any
        return tuple(convert(item, v, f"{where}[{i}]") for i, v in enumerate(value))
    if origin in (dict, collections.abc.Mapping) or annotation in (dict, Mapping, collections.abc.Mapping):
        if not isinstance(value, Mapping):
            raise InvalidInput(_wrong(where, "an object", value))
        item = args[1] if len(args) == 2 else Any
        items = {str(k): convert(item, v, _join(where, str(k))) for k, v in value.items()}
        return items if dict in (origin, annotation) else types.MappingProxyType(items)
    if annotation is bool:
        if isinstance(value, bool):
            return value
    elif annotation is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif annotation is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif annotation is str:
        if isinstance(value, str):
            return value
    elif annotation is Path:
        if isinstance(value, str) and value:
            return Path(value)
    else:
        raise TypeError(f"{where}: stageconfig cannot parse the annotation {annotation!r}")
    raise InvalidInput(_wrong(where, _describe(annotation), value))


def _describe(annotation: Any) -> str:
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string", Path: "a path string",
             type(None): "null"}
    if annotation in names:
        return names[annotation]
    if typing.get_origin(annotation) is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(annotation))
    if typing.get_origin(annotation) is tuple:
        return "a list"
    return "an object" if dataclasses.is_dataclass(annotation) else str(annotation)


def _wrong(where: str, expected: str, value: Any) -> str:
    shown = repr(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return f"{where}: expected {expected}, got {shown} ({_json_type(value)})"


def _json_type(value: Any) -> str:
    for kind, name in ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"),
                       (type(None), "null"), (Mapping, "object"), (list, "list")):
        if isinstance(value, kind):
            return name
    return type(value).__name__


def _join(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


# ---------------------------------------------------------------- the request itself

@dataclasses.dataclass(frozen=True)
class Example:
    """One of the spec's `examples` (engine-neutral; its other keys are the host's)."""

    extra_keys: ClassVar[str] = "ignore"

    input: str
    output: str = ""


def parse_request(cls: type[T], request: Mapping[str, Any]) -> T:
    """The typed request: `cls` is StageRequest (tt_stagekit.contract) or an engine's subclass declaring its
    `spec` dataclass."""
    return parse(cls, request, "request")
