"""The strict spec model of an engine block, derived from the block's settings dataclass (host side, pydantic).

An engine declares each setting once, with `tt_stagekit.settings.setting`, in a frozen dataclass its
stages parse requests into (docs/plugins.md, "Settings"). `settings_model(Settings)` is that block as the
host validates it: a `StrictModel` (unknown keys and wrong types refused, finite numbers, frozen) with
one field per dataclass field, in the same order, with the same default, its bounds as constraints and
its help as description. Types map as the stage reads them from the JSON the host sends: `tuple[X, ...]`
is `list[X]`, a nested settings dataclass is the model given for it in `models`, `Text`/`TextPath` are
the host's `Text` and `PathString` is `str`. Fields the `base` model already has (the torchrun settings
of `DistributedSettings`, the neutral `examples` of `BehaviorSpec`) are the base's. The engine's spec
module subclasses the result to add what only the host checks (validators, `spec_path`).
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Annotated, Any, Mapping, Optional, Union

from pydantic import BaseModel, Field, create_model

from tt_host.spec.strict import StrictModel, Text
from tt_stagekit.settings import STRING, TEXT, declaration

SETTINGS_ATTRIBUTE = "__tt_settings__"  # the dataclass a derived model was made from


def settings_model(settings: type, *, base: type[BaseModel] = StrictModel,
                   models: Optional[Mapping[type, type[BaseModel]]] = None) -> type[BaseModel]:
    """The strict spec model (pydantic) of an engine's settings dataclass: its fields, defaults, bounds and help.

    `base`: the model to extend (its fields are not repeated); `models`: the spec model of each nested settings
    dataclass. Subclass the result to add validators and `spec_path` (docs/plugins.md, "Settings")."""
    if not dataclasses.is_dataclass(settings):
        raise TypeError(f"{settings!r} is not a settings dataclass")
    models = dict(models or {})
    hints = typing.get_type_hints(settings, include_extras=True)
    fields: dict[str, Any] = {}
    for field in dataclasses.fields(settings):
        if not field.init or field.name in base.model_fields:
            continue
        declared = declaration(field)
        options: dict[str, Any] = dict(declared.bounds())
        if field.default is not dataclasses.MISSING:
            options.update(_default(field.default))
        elif field.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            options["default_factory"] = _factory(field.default_factory, models)  # type: ignore[misc]
        if declared.help is not None:
            options["description"] = declared.help
        if declared.validate_default:
            options["validate_default"] = True
        fields[field.name] = (host_type(hints[field.name], models), Field(**options))
    model = create_model(settings.__name__, __base__=base, __module__=__name__, **fields)
    setattr(model, SETTINGS_ATTRIBUTE, settings)
    return model


def settings_of(model: type[BaseModel]) -> Optional[type]:
    """The settings dataclass `model` was derived from (through any subclass), or None."""
    return getattr(model, SETTINGS_ATTRIBUTE, None)


def host_type(annotation: Any, models: Mapping[type, type[BaseModel]]) -> Any:
    """The pydantic annotation of a settings field annotated `annotation` on the stage side."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Annotated:
        marks = args[1:]
        if TEXT in marks:
            return Text
        if STRING in marks:
            return str
        return host_type(args[0], models)
    if annotation in models:
        return models[annotation]
    if dataclasses.is_dataclass(annotation):
        raise TypeError(f"settings_model: give the spec model of {annotation.__name__} in models=")
    if origin is tuple:
        return list[host_type(args[0], models)] if args else list
    if origin is Union:
        return Union[tuple(host_type(a, models) for a in args)]
    return annotation


def _default(value: Any) -> dict[str, Any]:
    if isinstance(value, tuple):  # a JSON list: a fresh list per model, as pydantic's default_factory=list
        return {"default_factory": list} if not value else {"default_factory": lambda: list(value)}
    return {"default": value}


def _factory(factory: Any, models: Mapping[type, type[BaseModel]]) -> Any:
    if factory in models:
        return models[factory]
    if dataclasses.is_dataclass(factory):
        raise TypeError(f"settings_model: give the spec model of {factory.__name__} in models=")
    return factory
