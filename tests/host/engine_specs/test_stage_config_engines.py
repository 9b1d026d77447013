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
    from tt_engine_adapter import spec as aspec
    from tt_engine_adapter.runtime import config

    names = [f.name for f in dataclasses.fields(config.AdapterSettings)]
    assert names == list(aspec.Hyperparameters.model_fields), "same settings, same order"
    _same_defaults(config.AdapterSettings, aspec.Hyperparameters, names)
    _same_defaults(config.DatasetSplits, aspec.Datasets, [f.name for f in dataclasses.fields(config.DatasetSplits)])
    assert [f.name for f in dataclasses.fields(config.DatasetSource)] == list(aspec.Source.model_fields)
    _same_defaults(config.DatasetSource, aspec.Source, [f.name for f in dataclasses.fields(config.DatasetSource)])
    spec_fields = [f.name for f in dataclasses.fields(config.AdapterSpecFields)]
    assert set(spec_fields) <= set(aspec.AdapterSpec.model_fields)
    _same_defaults(config.AdapterSpecFields, aspec.AdapterSpec, [n for n in spec_fields if n not in ("base_model",)])


def test_adapter_parses_what_the_host_sends(tmp_path):
    from tt_engine_adapter import spec as aspec
    from tt_engine_adapter.runtime import config

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    spec = aspec.AdapterSpec.model_validate(
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


def test_foundation_config_matches_the_spec_model():
    from tt_engine_foundation import spec
    from tt_engine_foundation.runtime import config

    names = [f.name for f in dataclasses.fields(config.FoundationSettings)]
    assert names == list(spec.FoundationConfig.model_fields), "same settings, same order"
    _same_defaults(config.FoundationSettings, spec.FoundationConfig, names)
    assert {f.name for f in dataclasses.fields(config.FoundationSpecFields)} <= set(spec.FoundationSpec.model_fields)


def test_foundation_parses_what_the_host_sends(tmp_path):
    from tt_engine_foundation import spec as fspec
    from tt_engine_foundation.runtime import config

    (tmp_path / "corpus.txt").write_text("some text\n\nmore text\n")
    spec = fspec.FoundationSpec.model_validate(
        {"name": "t", "engine": "foundation", "system_prompt": "Add.", "examples": [{"input": "1+1", "output": "2"}],
         "foundation": {"corpus_path": "corpus.txt", "depth": 2, "learning_rate": 0.01, "pretrain_steps": 30}},
        context={"spec_dir": tmp_path})
    body = {"run_dir": str(tmp_path / "run"), "stage_dir": str(tmp_path / "run" / "pretrain"),
            "result_path": str(tmp_path / "r.json"), "stage": "pretrain", "spec": spec.model_dump(mode="json")}
    request = config.parse(body)
    assert request.cfg.corpus_path == tmp_path / "corpus.txt" and request.cfg.depth == 2
    assert request.cfg.peak_learning_rate() == 0.01 and request.cfg.init_model is None
    assert request.layout.tokenizer_json == tmp_path / "run" / "tokenizer" / "tokenizer.json"
    assert request.answers == ["2"]

    body["spec"]["foundation"]["bf16"] = "yes"
    with pytest.raises(InvalidInput, match=r"^request\.spec\.foundation\.bf16: expected true or false, got 'yes'"):
        config.parse(body)


@pytest.mark.parametrize("engine", ["adapter", "foundation"])
def test_no_class_name_means_two_classes(engine):
    """The host's spec blocks (spec.py, pydantic) and the stages' dataclasses (runtime/config.py) are named apart."""
    import importlib

    def classes(module) -> set[str]:
        return {name for name, value in vars(module).items() if isinstance(value, type) and value.__module__ == module.__name__}

    host = classes(importlib.import_module(f"tt_engine_{engine}.spec"))
    stage = classes(importlib.import_module(f"tt_engine_{engine}.runtime.config"))
    assert host and stage and not host & stage, f"named in both spec.py and runtime/config.py: {sorted(host & stage)}"
