"""`foundation.document_start_share` (how often BOS-aligned pretraining sees a document's beginning): a
pretraining input, so changing it re-runs pretraining onward and reuses the tokenizer and token cache; bad
values, and a share with `packing: stream` (whose windows start anywhere), are refused by `tt validate`
and `tt run` naming the field, exit 2, nothing created."""

from __future__ import annotations

import json

import pytest

from badinput_support import assert_refused, in_process_tt, snapshot
from foundation_plan_support import TUNING, foundation_spec, prints
from test_foundation_finetune_rate import small_foundation_spec


def test_start_share_reaches_pretraining_onward_and_not_the_token_cache(tmp_path):
    base = prints(*foundation_spec(tmp_path))
    weighted = prints(*foundation_spec(tmp_path, document_start_share=0.3))
    assert weighted["tokenizer"] == base["tokenizer"] and weighted["token_cache"] == base["token_cache"]
    for name in ("pretrain", "bpb") + TUNING:
        assert weighted[name] != base[name], name


@pytest.fixture(scope="module")
def tt_in(tmp_path_factory):
    with in_process_tt(tmp_path_factory.mktemp("tt-in")) as tt:
        yield tt


@pytest.mark.parametrize("block", [{"document_start_share": -0.1}, {"document_start_share": 1.0},
                                   {"document_start_share": "often"},
                                   {"document_start_share": 0.3, "packing": "stream"}])
def test_bad_start_shares_are_refused_naming_the_field(tt_in, tmp_path, block):
    spec = small_foundation_spec(tmp_path / "s", **block)
    out = assert_refused(tt_in, spec, "foundation.document_start_share", tmp_path, snapshot(tmp_path))
    if "packing" in block:
        assert "bos_aligned" in json.dumps(out)
