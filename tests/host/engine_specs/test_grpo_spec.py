"""The `reinforcement` block: the host's model (reinforcement_spec.py) and the runtime's mirror agree, a spec with it
validates and parses, and a bad value is refused naming the field."""

from __future__ import annotations

import dataclasses

import pytest
from pydantic import ValidationError

SPEC = {"name": "t", "engine": "adapter", "base_model": "model", "system_prompt": "Be brief.",
        "examples": [{"input": "a", "output": "b"}, {"input": "c", "output": "d"}]}


def _folder(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")


def test_reinforcement_settings_mirror_the_spec_block():
    from tt_engine_adapter.reinforcement_spec import Reinforcement
    from tt_engine_adapter.runtime.config import AdapterSpecFields, ReinforcementSettings

    names = [f.name for f in dataclasses.fields(ReinforcementSettings)]
    assert names == list(Reinforcement.model_fields), "same settings, same order"
    spec_defaults = Reinforcement().model_dump(mode="json")
    assert dataclasses.asdict(ReinforcementSettings()) == spec_defaults
    assert {f.name: f.default for f in dataclasses.fields(AdapterSpecFields)}["reinforcement"] is None
    assert all(info.description for info in Reinforcement.model_fields.values()), "each setting has its help"


def test_a_spec_with_reinforcement_validates_and_parses(tmp_path):
    from tt_engine_adapter import spec as aspec
    from tt_engine_adapter.runtime import config

    _folder(tmp_path)
    spec = aspec.AdapterSpec.model_validate({**SPEC, "reinforcement": {"group_size": 6, "kl_beta": 0.04}},
                                            context={"spec_dir": tmp_path})
    body = {"run_dir": str(tmp_path), "stage_dir": str(tmp_path / "reinforce"), "result_path": str(tmp_path / "r"),
            "stage": "reinforce", "spec": spec.model_dump(mode="json")}
    rs = config.parse(body).spec.reinforcement
    assert rs.group_size == 6 and rs.kl_beta == 0.04 and rs.algorithm == "grpo" and rs.loss_type == "dapo"
    assert config.parse({**body, "spec": {**body["spec"], "reinforcement": None}}).spec.reinforcement is None


@pytest.mark.parametrize("block,field", [({"group_size": 1}, "group_size"), ({"algorithm": "ppo"}, "algorithm"),
                                         ({"temperature": 0}, "temperature"), ({"steps": "5"}, "steps"),
                                         ({"beta": 0.1}, "beta")])
def test_a_bad_reinforcement_value_is_refused_naming_the_field(tmp_path, block, field):
    from tt_engine_adapter import spec as aspec

    _folder(tmp_path)
    with pytest.raises(ValidationError) as caught:
        aspec.AdapterSpec.model_validate({**SPEC, "reinforcement": block}, context={"spec_dir": tmp_path})
    assert any(error["loc"][:2] == ("reinforcement", field) for error in caught.value.errors()), caught.value
