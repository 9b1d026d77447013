"""Each engine setting is declared once (docs/plugins.md, "Settings"): every field of a shipped engine's spec model,
down through its blocks, is derived from the engine's settings dataclass (formats/settings.py) by
`tt_host.api.settings_model`, except the neutral spec's own (`BehaviorSpec`) and the engine's name. So the stage's
typed config and the host's strict block agree by construction: same names, order, defaults, bounds and help.
"""

from __future__ import annotations

import dataclasses
import json
import typing

import pytest
from pydantic import BaseModel

from tt_host.api import BehaviorSpec, settings_model
from tt_host.spec.settings import settings_of
from tt_stagekit.settings import declaration, default_of

HOST_ONLY = {"engine"}  # the engine's name: the host picks the engine by it, no stage reads it


def _spec_models(engine: str) -> type[BaseModel]:
    if engine == "adapter":
        from tt_engine_adapter.spec import AdapterSpec

        return AdapterSpec
    from tt_engine_foundation.spec import FoundationSpec

    return FoundationSpec


def _nested(annotation) -> list[type[BaseModel]]:
    """The models an annotation names (`Optional[Source]`, `list[Source]`, ...)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for arg in typing.get_args(annotation) for model in _nested(arg)]


def declared_twice(model: type[BaseModel]) -> list[str]:
    """Dotted names of the fields of `model` and its nested blocks that no settings dataclass declares."""
    out, seen, todo = [], set(), [(model, model.__name__)]
    while todo:
        block, where = todo.pop()
        if block in seen:
            continue
        seen.add(block)
        settings = settings_of(block)
        names = {f.name for f in dataclasses.fields(settings)} if settings else set()
        neutral = set(BehaviorSpec.model_fields) if issubclass(block, BehaviorSpec) else set()
        for name, info in block.model_fields.items():
            if name in neutral:
                continue
            if name not in names and name not in HOST_ONLY:
                out.append(f"{where}.{name}")
            todo += [(inner, f"{where}.{name}") for inner in _nested(info.annotation)]
    return out


@pytest.mark.parametrize("engine", ["adapter", "foundation"])
def test_no_setting_is_declared_on_both_sides(engine):
    assert declared_twice(_spec_models(engine)) == [], "declare these once, in the engine's formats/settings.py"


def test_a_field_declared_on_the_host_side_is_found():
    from tt_engine_adapter.formats.settings import ReinforcementSettings

    class Twice(settings_model(ReinforcementSettings)):
        extra_knob: int = 3

    assert declared_twice(Twice) == ["Twice.extra_knob"]


@pytest.mark.parametrize("engine", ["adapter", "foundation"])
def test_the_derived_blocks_agree_with_their_dataclasses(engine):
    """Names and order, defaults (as the JSON the host sends), help and bounds: the derivation is exact."""
    model = _spec_models(engine)
    blocks = [b for b in {m for info in model.model_fields.values() for m in _nested(info.annotation)} | {model}
              if settings_of(b)]
    assert len(blocks) >= (5 if engine == "adapter" else 1)
    for block in blocks:
        settings = settings_of(block)
        neutral = set(BehaviorSpec.model_fields) if issubclass(block, BehaviorSpec) else set()
        own = [f for f in dataclasses.fields(settings) if f.name not in neutral]
        assert [f.name for f in own] == [n for n in block.model_fields if n in {f.name for f in own}]
        for field in own:
            info, meant = block.model_fields[field.name], declaration(field)
            assert info.description == meant.help, field.name
            default = default_of(field)
            if default is dataclasses.MISSING:
                assert info.is_required(), field.name
                continue
            got = info.get_default(call_default_factory=True)
            got = got.model_dump(mode="json") if isinstance(got, BaseModel) else got
            want = dataclasses.asdict(default) if dataclasses.is_dataclass(default) else default
            assert json.loads(json.dumps(got, default=str)) == json.loads(json.dumps(want, default=str)), field.name
            bounds = {name: getattr(m, name) for m in info.metadata for name in meant.bounds() if hasattr(m, name)}
            assert bounds == meant.bounds(), field.name
