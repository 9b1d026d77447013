"""foundation.sft_datasets: chat JSONL rows (multi-turn, prompt/completion) checked at validate, added to SFT."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from tt_engine_foundation.runtime.config import parse
from tt_engine_foundation.spec import FoundationSpec
from tt_engine_foundation.stages.sft import sft_rows

SYSTEM = "Answer."
ROWS = [
    {"messages": [{"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1"},
                  {"role": "user", "content": "q2"}, {"role": "assistant", "content": "a2"}], "source": "x"},
    {"id": "pc", "prompt": "q3", "completion": "a3"},
]


def _spec(tmp_path, rows):
    (tmp_path / "chat.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return FoundationSpec.model_validate(
        {"name": "f", "engine": "foundation", "system_prompt": SYSTEM,
         "examples": [{"input": "e1", "output": "o1"}, {"input": "e2", "output": "o2"}],
         "foundation": {"sft_datasets": ["chat.jsonl"], "finetune_steps": 1}},
        context={"spec_dir": str(tmp_path)})


def test_sft_trains_on_dataset_rows_led_by_the_compiled_system_message(tmp_path):
    spec = _spec(tmp_path, ROWS)
    request = parse({"run_dir": str(tmp_path), "stage_dir": str(tmp_path / "sft"), "result_path": str(tmp_path / "r"),
                     "spec": spec.model_dump(mode="json"), "system_message": SYSTEM,
                     "train_rows": [{"id": "e1", "messages": [{"role": "system", "content": SYSTEM},
                                                             {"role": "user", "content": "e1"},
                                                             {"role": "assistant", "content": "o1"}]}]})
    rows = sft_rows(request)
    assert [r["id"] for r in rows][::2] == ["e1", "pc"]
    assert [[m["role"] for m in r["messages"]] for r in rows[1:]] == [
        ["system", "user", "assistant", "user", "assistant"], ["system", "user", "assistant"]]
    assert all(r["messages"][0] == {"role": "system", "content": SYSTEM} for r in rows)


@pytest.mark.parametrize("row, message", [
    ({"messages": [{"role": "system", "content": "Other."}, {"role": "user", "content": "q"},
                   {"role": "assistant", "content": "a"}]}, "differs from the spec's compiled system message"),
    ({"messages": [{"role": "tool", "content": "q"}, {"role": "assistant", "content": "a"}]}, "role must be"),
    ({"prompt": "q"}, "needs 'completion'"),
])
def test_bad_rows_are_refused_naming_file_and_line(tmp_path, row, message):
    with pytest.raises(ValidationError, match=rf"chat.jsonl:3: .*{message}"):
        _spec(tmp_path, ROWS + [row])
