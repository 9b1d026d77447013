"""Stage fingerprints cover what each stage reads (the foundation engine's declarations, through the host's
`chain`), and `decide` turns changed inputs into reuse, re-run or refusal; plus the `tt init` placeholders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tt_engine_foundation.plugin import ENGINE
from tt_host.engine import Engine, Stage
from tt_host.runs.plan import decide, refusal
from tt_host.engine import needs_error
from tt_host.runs.fingerprint import chain
from tt_host.spec.placeholders import find_placeholders, starter_spec

from foundation_plan_support import PRETRAINING, TUNING, completed_run_state, foundation_spec, prints


def test_examples_and_tuning_settings_reach_only_sft_onward(tmp_path):
    base = prints(*foundation_spec(tmp_path))
    for change in ({"examples": 7}, {"finetune_steps": 5}, {"rl_steps": 3}):
        examples = change.pop("examples", 6)
        other = prints(*foundation_spec(tmp_path, examples=examples, **change))
        for name in PRETRAINING:
            assert other[name] == base[name], (change, name)
        assert other["chat_eval"] != base["chat_eval"], change
    assert prints(*foundation_spec(tmp_path, finetune_steps=5))["sft"] != base["sft"]


def test_pretraining_settings_reach_pretraining_and_everything_after(tmp_path):
    base = prints(*foundation_spec(tmp_path))
    deeper = prints(*foundation_spec(tmp_path, depth=3))
    assert deeper["tokenizer"] == base["tokenizer"] and deeper["token_cache"] == base["token_cache"]
    for name in ("pretrain", "bpb") + TUNING:
        assert deeper[name] != base[name], name
    qk_norm = prints(*foundation_spec(tmp_path, qk_norm=True))  # the model's architecture (formats/weights.py)
    assert qk_norm["tokenizer"] == base["tokenizer"] and qk_norm["token_cache"] == base["token_cache"]
    for name in ("pretrain", "bpb") + TUNING:
        assert qk_norm[name] != base[name], name
    more_text = prints(*foundation_spec(tmp_path, max_chars=5000))
    assert more_text["tokenizer"] == base["tokenizer"] and more_text["token_cache"] != base["token_cache"]


def test_the_derived_rate_rule_reaches_pretraining_unless_a_rate_is_set(tmp_path, monkeypatch):
    """The batch rule of the derived rates (formats.weights.BATCH_SCALE_FLOOR) is a pretrain input, so a finished
    pretraining made under another rule is not reused; a set learning_rate (or optimizer adamw) replaces it."""
    from tt_engine_foundation import plugin

    specs = {"derived": {}, "set": {"learning_rate": 0.01}, "adamw": {"optimizer": "adamw"}}
    before = {name: prints(*foundation_spec(tmp_path / name, **block)) for name, block in specs.items()}
    monkeypatch.setattr(plugin, "BATCH_SCALE_FLOOR", 0.5)
    after = {name: prints(*foundation_spec(tmp_path / name, **block)) for name, block in specs.items()}
    changed = [n for n in before["derived"] if after["derived"][n] != before["derived"][n]]
    assert "tokenizer" not in changed and "token_cache" not in changed
    assert {"pretrain", "bpb", *TUNING} <= set(changed)
    assert after["set"] == before["set"] and after["adamw"] == before["adamw"]


def test_without_a_corpus_the_smoke_corpus_makes_pretraining_read_the_examples(tmp_path):
    base = prints(*foundation_spec(tmp_path, corpus=False))
    more = prints(*foundation_spec(tmp_path, corpus=False, examples=7))
    for name in PRETRAINING + TUNING:
        assert more[name] != base[name], name


def test_decide_reuses_pretraining_reruns_tuning_and_refuses_depth(tmp_path):
    from tt_host.runs.store import RunDir

    run = RunDir(tmp_path / "run")
    state = completed_run_state(*foundation_spec(tmp_path), run.path)
    spec, compiled = foundation_spec(tmp_path, examples=7, finetune_steps=5)
    decisions = {d.stage: d for d in decide(chain(ENGINE, spec, compiled), state, run, spec)}
    assert [decisions[n].action for n in PRETRAINING] == ["reuse"] * 4
    assert [decisions[n].action for n in TUNING] == ["rerun"] * 3
    assert "foundation.finetune_steps" in decisions["sft"].reason and "examples" in decisions["sft"].reason
    assert refusal(list(decisions.values())) is None
    spec, compiled = foundation_spec(tmp_path, finetune_steps=5)
    rl = decide(chain(ENGINE, spec, compiled), state, run, spec)[TUNING.index("rl") + len(PRETRAINING)]
    assert rl.action == "rerun" and "foundation.finetune_steps (via stage 'sft')" in rl.reason

    spec, compiled = foundation_spec(tmp_path, depth=3)
    decisions = decide(chain(ENGINE, spec, compiled), state, run, spec)
    message = refusal(decisions)
    assert message is not None and message.startswith("stage 'pretrain' is completed")
    assert "changed: foundation.depth)" in message and "new run directory" in message


def test_needs_must_name_earlier_stages():
    ok = (Stage("a", "m.a"), Stage("b", "m.b", needs=("a",)))
    assert needs_error(ok) is None
    assert "needs 'c'" in needs_error((Stage("a", "m.a", needs=("c",)),))
    assert "needs 'b'" in needs_error((Stage("a", "m.a", needs=("b",)), Stage("b", "m.b")))


def test_default_stages_keep_the_chain():
    """An engine that declares nothing keeps the linear chain: a change reaches every later stage."""
    from types import SimpleNamespace

    from tt_host.spec.schema import BehaviorSpec

    engine = Engine(name="x", spec_model=BehaviorSpec, runtime_project=Path("."),
                    stages=(Stage("a", "m.a", inputs=lambda s: {"n": s.description}), Stage("b", "m.b", inputs=lambda s: {})))
    compiled = SimpleNamespace(system_message_sha256="s", train_rows=[], eval_rows=[])
    first = chain(engine, BehaviorSpec(name="n", description="1"), compiled)
    second = chain(engine, BehaviorSpec(name="n", description="2"), compiled)
    assert first[1][2] != second[1][2]


@pytest.mark.parametrize("engine", ["adapter", "foundation"])
def test_starter_spec_placeholders_are_found_by_field(engine):
    from tt_host.plugins import plugins

    record = plugins().engine(engine)
    raw = json.loads(json.dumps(starter_spec(record)))
    found = dict(find_placeholders(raw, record))
    assert {"name", "system_prompt", "guidelines.0", "examples.0.input", "examples.1.output"} <= set(found)
    assert ("base_model" in found) == (engine == "adapter")
    assert ("foundation.corpus_path" in found) == (engine == "foundation")
    raw["system_prompt"] = "Keep a TODO: list tidy."  # a user's own words may say TODO
    raw["examples"][0]["input"] = "TODO: buy milk"
    assert "system_prompt" not in dict(find_placeholders(raw, record))
    assert "examples.0.input" not in dict(find_placeholders(raw, record))
