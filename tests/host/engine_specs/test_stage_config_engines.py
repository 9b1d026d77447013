"""What the host sends (a validated spec, `model_dump(mode="json")`) parses into the engines' typed stage configs.

The spec models are derived from the same settings dataclasses (test_settings_declared_once.py), so names and
defaults agree by construction; these tests hold the values and a wrong type across the process boundary.
"""

from __future__ import annotations

import pytest
from tt_stagekit.protocol import InvalidInput


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
    assert config.peak_learning_rate(request.cfg) == 0.01 and request.cfg.init_model is None
    assert request.layout.tokenizer_json == tmp_path / "run" / "tokenizer" / "tokenizer.json"
    assert request.answers == ["2"]

    body["spec"]["foundation"]["bf16"] = "yes"
    with pytest.raises(InvalidInput, match=r"^request\.spec\.foundation\.bf16: expected true or false, got 'yes'"):
        config.parse(body)


@pytest.mark.parametrize("engine", ["adapter", "foundation"])
def test_no_class_name_means_two_classes(engine):
    """The host's spec blocks (spec.py, pydantic) and the settings dataclasses (formats/settings.py, read by
    runtime/config.py) are named apart."""
    import importlib

    def classes(module) -> set[str]:
        return {name for name, value in vars(module).items() if isinstance(value, type) and value.__module__ == module.__name__}

    host = classes(importlib.import_module(f"tt_engine_{engine}.spec"))
    stage = classes(importlib.import_module(f"tt_engine_{engine}.formats.settings"))
    stage |= classes(importlib.import_module(f"tt_engine_{engine}.runtime.config"))
    assert host and stage and not host & stage, f"named in both spec.py and formats/settings.py: {sorted(host & stage)}"
