"""run.json through the typed RunState (tt_host.runs.state) keeps the bytes the host wrote as a plain dict.

The fixtures in tests/fixtures/run-json/ are run.json files written by the host before RunState existed
(real runs of the echo engine: one failed at a stage, one refused by the stage as invalid input, one
finished and resumed with every stage reused). Each reads into a RunState and writes back byte for byte;
and a state built the way tt_host.runs.drive builds one, a stage taken through its life, has the keys
of those files in their order.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tt_host.runs.state import ABSENT, COMPLETED, FAILED, RunState, StageRecord

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "run-json"


def written(data) -> str:
    """As tt_host.fsutil.write_json_atomic writes it."""
    return json.dumps(data, indent=2, sort_keys=False, ensure_ascii=False) + "\n"


@pytest.mark.parametrize("name", ["failed.json", "refused.json", "resumed.json"])
def test_a_run_json_written_before_the_types_round_trips_byte_for_byte(name):
    text = (FIXTURES / name).read_text(encoding="utf-8")
    assert written(RunState.from_json(json.loads(text)).to_json()) == text


def test_unknown_keys_are_kept():
    data = json.loads((FIXTURES / "failed.json").read_text(encoding="utf-8"))
    data["written_by_a_later_tt"] = {"x": 1}
    data["stages"]["train"]["also_later"] = [1]
    state = RunState.from_json(data)
    assert state.to_json()["written_by_a_later_tt"] == {"x": 1}
    assert state.to_json()["stages"]["train"]["also_later"] == [1]


def test_a_new_state_taken_through_a_stage_has_the_keys_of_the_old_files_in_order():
    old = json.loads((FIXTURES / "failed.json").read_text(encoding="utf-8"))
    state = RunState(id="r", engine="echo", engine_distribution="d", engine_version="v", host_version="h",
                     spec_name="n", spec_path="p", spec_sha256="s", system_message_sha256="m", env_key="k",
                     created_at="t", stages={"prepare": StageRecord(), "train": StageRecord(),
                                             "evaluate": StageRecord()})
    state.updated_at = "t"  # RunDir.save
    prepare, train = state.stages["prepare"], state.stages["train"]
    prepare.started("f", {"a": 1}, "t")
    prepare.ended("t", 0, 0.1)
    prepare.state, prepare.result_sha256 = COMPLETED, "r"
    train.started("f", {"a": 1}, "t")
    train.ended("t", 1, 0.1)
    train.failed(FAILED, "why")
    state.status, state.error = "failed", "why"
    new = state.to_json()
    assert list(new) == list(old)
    for name in ("prepare", "train", "evaluate"):
        assert list(new["stages"][name]) == list(old["stages"][name]), name
    assert new["stages"]["train"]["error"] == "why" and "result_sha256" not in new["stages"]["train"]


def test_a_running_stage_writes_null_exit_code_and_error_but_no_end():
    record = StageRecord()
    record.started("f", {}, "t")
    assert record.to_json() == {"state": "running", "fingerprint": "f", "inputs": {}, "started_at": "t",
                                "exit_code": None, "error": None}
    assert record.finished_at is ABSENT
