"""The `reinforcement` block: each setting has its help, a spec with it validates and parses, and a bad value is refused naming the field; `tt run --dry-run` lists `sft` and `reinforce`
between `train` and `candidate`, and the reinforce stage's fingerprint holds its settings and the declared graders
(what it is rewarded by), so changing either runs it again while `train` is reused."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

SPEC = {"name": "t", "engine": "adapter", "base_model": "model", "system_prompt": "Be brief.",
        "examples": [{"input": "a", "output": "b"}, {"input": "c", "output": "d"}]}


def _folder(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")


def test_each_reinforcement_setting_has_its_help():
    from tt_engine_adapter.reinforcement_spec import Reinforcement

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


def _run_spec(folder, **extra):
    import json

    from conftest import write_spec

    model = folder / "model"
    model.mkdir(parents=True, exist_ok=True)
    (model / "config.json").write_text(json.dumps({"hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 512}))
    examples = [{"input": f"What is {i} plus {i}?", "output": str(2 * i)} for i in range(10)]
    return write_spec(folder, {"name": "sums", "engine": "adapter", "base_model": "model", "device": "cpu",
                               "system_prompt": "Answer with the number.", "examples": examples,
                               "hyperparameters": {"max_seq_length": 128}, **extra})


def test_dry_run_lists_sft_and_reinforce_between_train_and_candidate(tt, tmp_path):
    code, plan = tt.json("run", _run_spec(tmp_path / "s", reinforcement={"steps": 2}), "--dry-run")
    assert code == 0, plan
    actions = {d["stage"]: d["action"] for d in plan["stages"]}
    names = [d["stage"] for d in plan["stages"] if d["action"] != "skip"]
    assert names[names.index("train"):] == ["train", "sft", "reinforce", "candidate"], names
    assert actions["reference"] == actions["preference"] == "skip", actions
    code, plain = tt.json("run", _run_spec(tmp_path / "p"), "--dry-run")
    assert code == 0 and {d["stage"]: d["action"] for d in plain["stages"]}["reinforce"] == "skip", plain


def test_the_reinforce_fingerprint_holds_its_settings_and_the_declared_graders(tmp_path):
    from tt_host.plugins import load_plugins
    from tt_host.runs.fingerprint import chain
    from tt_host.spec.loading import load_spec

    plugins = load_plugins()
    engine = plugins.engine("adapter")

    def prints(**extra):
        loaded = load_spec(_run_spec(tmp_path / "one", **extra), plugins)
        assert loaded.valid, loaded.errors
        return {p.stage.name: p.fingerprint for p in chain(engine, loaded.spec, loaded.compiled)}

    first = prints(reinforcement={"steps": 2})
    other = prints(reinforcement={"steps": 2, "kl_beta": 0.04})
    graded = prints(reinforcement={"steps": 2}, evaluation={"graders": [{"kind": "number"}]})
    assert first["train"] == other["train"] == graded["train"]
    assert first["reinforce"] != other["reinforce"] and first["candidate"] != other["candidate"]
    assert first["reinforce"] != graded["reinforce"]  # rewarded by other graders: trained again


def test_an_answer_budget_that_leaves_no_room_for_the_prompt_is_refused_at_validate(tt, tmp_path):
    """max_seq_length 128: reinforcement.max_new_tokens 128 (or the derived pairs' sample length) would leave the
    prompt nothing and fail after the SFT stage had trained; `tt validate` and `tt run` exit 2 naming the field."""
    cases = {"grpo": ({"reinforcement": {"steps": 2, "max_new_tokens": 128}}, "reinforcement.max_new_tokens"),
             "derived": ({"preference": {"pairs": "derived", "max_new_tokens": 200}}, "preference.max_new_tokens"),
             "derived default": ({"preference": {"pairs": "derived"}, "hyperparameters": {"max_seq_length": 64,
                                                                                         "max_new_tokens": 64}},
                                 "hyperparameters.max_new_tokens")}
    for what, (extra, field) in cases.items():
        path = _run_spec(tmp_path / what.replace(" ", "-"), **extra)
        code, out = tt.json("validate", path)
        assert code == 2 and f"{field}" in json.dumps(out) and "no room for the prompt" in json.dumps(out), (what, out)
        run = tt("run", path)
        assert run.returncode == 2 and field in run.stderr, (what, run.stderr)
        assert not (path.parent / ".tuned-tensor").exists()
    ok = _run_spec(tmp_path / "ok", reinforcement={"steps": 2, "max_new_tokens": 127})
    assert tt.json("validate", ok)[0] == 0
