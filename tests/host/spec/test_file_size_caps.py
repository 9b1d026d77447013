"""Spec and dataset files are read with a size cap: a file over it is refused by its size (naming it), never read
whole into memory."""

from __future__ import annotations

import pytest

from badinput_support import in_process_tt
from conftest import echo_spec, write_spec


@pytest.fixture(scope="module")
def tt_in(tmp_path_factory):
    with in_process_tt(tmp_path_factory.mktemp("tt-in")) as tt:
        yield tt


def test_a_sparse_64_gib_spec_or_dataset_is_refused_by_size_not_read(tt_in, tmp_path):
    spec = tmp_path / "big" / "tunedtensor.json"
    spec.parent.mkdir()
    with open(spec, "wb") as handle:
        handle.truncate(64 << 30)  # sparse: no disk used, a MemoryError for whoever reads it whole
    code, out = tt_in.json("validate", spec)
    assert code == 2 and any("over the" in e["msg"] and str(spec) in e["msg"] for e in out["errors"]), out
    folder = tmp_path / "s"
    with open(write_spec(folder, echo_spec()).with_name("general.jsonl"), "wb") as handle:
        handle.truncate(64 << 30)
    data = {**echo_spec(), "evaluation": {"general_regression": {"dataset": "general.jsonl"}}}
    code, out = tt_in.json("validate", write_spec(folder, data))
    assert code == 2 and any("over the" in e["msg"] for e in out["errors"]
                             if e["loc"].startswith("evaluation.general_regression")), out
