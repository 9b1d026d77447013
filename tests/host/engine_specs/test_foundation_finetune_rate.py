"""`foundation.finetune_learning_rate` (SFT's and RL's AdamW rate, apart from pretraining's `learning_rate`):
a stage input of sft and rl only, so changing it re-runs SFT onward and reuses pretraining; bad values are
refused by `tt validate` and `tt run` naming the field, exit 2, nothing created."""

from __future__ import annotations

import json

import pytest

from badinput_support import assert_refused, in_process_tt, snapshot
from conftest import write_spec
from foundation_plan_support import PRETRAINING, TUNING, foundation_spec, prints, sft_onward_decisions_after
from tt_engine_foundation.plugin import ENGINE
from tt_host.runs.fingerprint import chain


def test_finetune_rate_reaches_sft_onward_and_learning_rate_no_longer_does(tmp_path):
    base = prints(*foundation_spec(tmp_path))
    tuned = prints(*foundation_spec(tmp_path, finetune_learning_rate=0.003))
    assert [tuned[n] == base[n] for n in PRETRAINING] == [True] * len(PRETRAINING)
    assert [tuned[n] != base[n] for n in TUNING] == [True] * len(TUNING)
    # learning_rate is pretraining's alone: SFT and RL change only through the pretrained weights
    spec, compiled = foundation_spec(tmp_path, learning_rate=0.01)
    inputs = {stage.name: value for stage, value, _ in chain(ENGINE, spec, compiled)}
    assert "learning_rate" in inputs["pretrain"]["foundation"]
    assert "learning_rate" not in inputs["sft"]["foundation"] and "learning_rate" not in inputs["rl"]["foundation"]


def test_a_finished_run_reruns_only_sft_onward_for_a_new_finetune_rate(tmp_path):
    decisions = sft_onward_decisions_after(tmp_path, finetune_learning_rate=0.003)
    assert "foundation.finetune_learning_rate" in decisions["sft"].reason


@pytest.fixture(scope="module")
def tt_in(tmp_path_factory):
    with in_process_tt(tmp_path_factory.mktemp("tt-in")) as tt:
        yield tt


def small_foundation_spec(folder, **foundation):
    """A four-example foundation spec in `folder` with a one-line corpus and the given `foundation` settings."""
    folder.mkdir()
    (folder / "corpus.jsonl").write_text('{"text": "one two three"}\n')
    raw = {"name": "f", "engine": "foundation", "system_prompt": "Answer.",
           "examples": [{"input": f"q{i}", "output": f"a{i}"} for i in range(4)],
           "foundation": {"corpus_path": "corpus.jsonl", **foundation}}
    return write_spec(folder, raw)


@pytest.mark.parametrize("value", [0, -0.01, 1.5, "fast", True, None])
def test_bad_finetune_rates_are_refused_naming_the_field(tt_in, tmp_path, value):
    spec = small_foundation_spec(tmp_path / "s", finetune_learning_rate="PLACEHOLDER")
    spec.write_text(spec.read_text().replace('"PLACEHOLDER"', json.dumps(value)))
    if value is None:  # JSON null is "unset": the derived default
        code, out = tt_in.json("validate", spec)
        assert code == 0, out
        return
    assert_refused(tt_in, spec, "foundation.finetune_learning_rate", tmp_path, snapshot(tmp_path))
