"""The engines' typed stage configs (frozen dataclasses, runtime side) match their spec models (pydantic, host side).

A setting added to a spec model but not to the engine's dataclass would be refused by every stage
("unknown to this engine's runtime"): these tests name it first. Field names and defaults must agree,
and what the host sends (a validated spec, `model_dump(mode="json")`) must parse.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
from pydantic import BaseModel

from tt_stagekit.protocol import InvalidInput


def _defaults(cls) -> dict:
    out = {}
    for field in dataclasses.fields(cls):
        if field.default is not dataclasses.MISSING:
            out[field.name] = field.default
        elif field.default_factory is not dataclasses.MISSING:
            out[field.name] = field.default_factory()
    return out


def _model_defaults(model: type[BaseModel]) -> dict:
    return {name: info.get_default(call_default_factory=True) for name, info in model.model_fields.items()
            if not info.is_required()}


def _same_defaults(dataclass_type, model: type[BaseModel], names) -> None:
    """Each dataclass default equals the model's, compared as the JSON the host sends."""
    ours, theirs = _defaults(dataclass_type), _model_defaults(model)
    for name in names:
        mine, spec = ours.get(name), theirs.get(name)
        if isinstance(spec, BaseModel):
            spec = spec.model_dump(mode="json")
        if dataclasses.is_dataclass(mine):
            mine = dataclasses.asdict(mine)
        mine, spec = (json.loads(json.dumps(v, default=str)) for v in (mine, spec))
        assert mine == spec, f"{dataclass_type.__name__}.{name}: default {mine!r} differs from the spec's {spec!r}"


def test_adapter_hyperparameters_match_the_spec_model():
    from tt_engine_adapter import plugin
    from tt_engine_adapter.runtime import config

    names = [f.name for f in dataclasses.fields(config.Hyperparameters)]
    assert names == list(plugin.Hyperparameters.model_fields), "same settings, same order"
    _same_defaults(config.Hyperparameters, plugin.Hyperparameters, names)
    _same_defaults(config.Datasets, plugin.Datasets, [f.name for f in dataclasses.fields(config.Datasets)])
    spec_fields = [f.name for f in dataclasses.fields(config.AdapterSpec)]
    assert set(spec_fields) <= set(plugin.AdapterSpec.model_fields)
    _same_defaults(config.AdapterSpec, plugin.AdapterSpec, [n for n in spec_fields if n not in ("base_model",)])


def test_adapter_parses_what_the_host_sends(tmp_path):
    from tt_engine_adapter import plugin
    from tt_engine_adapter.runtime import config

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    spec = plugin.AdapterSpec.model_validate(
        {"name": "t", "engine": "adapter", "base_model": "model", "system_prompt": "Be brief.",
         "examples": [{"input": "a", "output": "b"}, {"input": "c", "output": "d"}],
         "hyperparameters": {"lora_target_modules": ["q_proj", "v_proj"], "max_steps": 3, "learning_rate": 1e-3}},
        context={"spec_dir": tmp_path})
    body = {"run_dir": str(tmp_path), "stage_dir": str(tmp_path / "train"), "result_path": str(tmp_path / "r.json"),
            "stage": "train", "spec": spec.model_dump(mode="json")}
    request = config.parse(body)
    assert request.spec.base_model == str(model) and request.spec.is_local
    assert request.hp.target_modules == ["q_proj", "v_proj"] and request.hp.max_steps == 3
    assert request.hp.learning_rate == 1e-3 and request.spec.examples[1].output == "d"

    body["spec"]["hyperparameters"]["seed"] = "42"
    with pytest.raises(InvalidInput, match=r"^request\.spec\.hyperparameters\.seed: expected an integer, got '42'"):
        config.parse(body)
