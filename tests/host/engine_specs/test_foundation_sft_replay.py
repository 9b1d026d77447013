"""`foundation.finetune_corpus_rows` (pretraining rows replayed in every SFT step): a stage input of sft onward,
so changing it re-runs SFT onward and reuses pretraining; bad values, and replay with `init_model` (whose run
has no token cache), are refused by `tt validate` and `tt run` naming the field, exit 2, nothing created."""

from __future__ import annotations

import json

import pytest

from badinput_support import assert_refused, in_process_tt, snapshot
from foundation_plan_support import PRETRAINING, TUNING, foundation_spec, prints, sft_onward_decisions_after
from test_foundation_finetune_rate import small_foundation_spec


def test_replay_rows_reach_sft_onward_only(tmp_path):
    base = prints(*foundation_spec(tmp_path))
    replayed = prints(*foundation_spec(tmp_path, finetune_corpus_rows=2))
    assert [replayed[n] == base[n] for n in PRETRAINING] == [True] * len(PRETRAINING)
    assert [replayed[n] != base[n] for n in TUNING] == [True] * len(TUNING)
    assert prints(*foundation_spec(tmp_path, finetune_corpus_rows=3))["sft"] != replayed["sft"]


def test_a_finished_run_reruns_sft_onward_for_new_replay_rows(tmp_path):
    decisions = sft_onward_decisions_after(tmp_path, finetune_corpus_rows=2)
    assert "foundation.finetune_corpus_rows" in decisions["sft"].reason


@pytest.fixture(scope="module")
def tt_in(tmp_path_factory):
    with in_process_tt(tmp_path_factory.mktemp("tt-in")) as tt:
        yield tt


@pytest.mark.parametrize("value", [-1, 4097, 1.5, "some", True, None])
def test_bad_replay_rows_are_refused_naming_the_field(tt_in, tmp_path, value):
    spec = small_foundation_spec(tmp_path / "s", finetune_corpus_rows="PLACEHOLDER")
    spec.write_text(spec.read_text().replace('"PLACEHOLDER"', json.dumps(value)))
    assert_refused(tt_in, spec, "foundation.finetune_corpus_rows", tmp_path, snapshot(tmp_path))


def _base_model_folder(folder):
    """A foundation base-model folder as far as the spec checks it: its files listed in a verified manifest."""
    from tt_stagekit.manifest import write_manifest

    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / "tt-model.json").write_text(json.dumps({"format": 1, "model": {}}))
    write_manifest(folder, "foundation-base", "foundation", extra={"system_message_sha256": ""})
    return folder


def test_replay_with_init_model_is_refused_and_without_replay_the_same_spec_validates(tt_in, tmp_path):
    model = _base_model_folder(tmp_path / "base")
    for rows, code in ((0, 0), (2, 2)):
        folder = tmp_path / f"s{rows}"
        spec = small_foundation_spec(folder, init_model=str(model), finetune_corpus_rows=rows)
        raw = json.loads(spec.read_text())
        del raw["foundation"]["corpus_path"]
        spec.write_text(json.dumps(raw))
        if code == 0:
            got, out = tt_in.json("validate", spec)
            assert got == 0, out
        else:
            out = assert_refused(tt_in, spec, "foundation.finetune_corpus_rows", tmp_path, snapshot(tmp_path))
            assert "init_model" in json.dumps(out)
