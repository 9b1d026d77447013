"""ShareGPT and alpaca dataset rows (tt_stagekit.rowformats): mapped onto chat messages by the readers that take
prompt/completion rows too (the adapter's datasets, the foundation's sft_datasets), refused naming the file:line,
the format and the mapping by a reader of `messages` rows only (the general-regression set) and where a row
cannot be mapped; `tt validate` exits 2 and creates nothing (docs/adapter.md "Dataset rows")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from badinput_support import general_set_refusal, in_process_tt
from tt_engine_adapter.formats import rows

CHAT = [{"messages": [{"role": "user", "content": "Add 2 and 3."}, {"role": "assistant", "content": "5"}]},
        {"messages": [{"role": "user", "content": "Name a colour.\n\nwarm"}, {"role": "assistant", "content": "red"}]},
        {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"},
                      {"role": "user", "content": "Bye"}, {"role": "assistant", "content": "Goodbye"}]}]
OTHER = [{"instruction": "Add 2 and 3.", "input": "", "output": "5"},
         {"instruction": "Name a colour.", "input": "warm", "output": "red"},
         {"conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello"},
                            {"from": "user", "value": "Bye"}, {"from": "assistant", "value": "Goodbye"}]}]
SHAREGPT = {"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}]}
ALPACA = {"instruction": "q", "input": "", "output": "a"}


def jsonl(path: Path, lines: list) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


@pytest.fixture(scope="module")
def tt_in(tmp_path_factory):
    with in_process_tt(tmp_path_factory.mktemp("tt-in")) as tt:
        yield tt


def test_sharegpt_and_alpaca_rows_read_as_the_chat_rows_they_map_to(tmp_path):
    expected = [r["messages"] for r in rows.read_chat_jsonl(jsonl(tmp_path / "chat.jsonl", CHAT), "train")]
    mapped = [r["messages"] for r in rows.read_chat_jsonl(jsonl(tmp_path / "other.jsonl", OTHER), "train")]
    assert mapped == expected
    from tt_stagekit.chatrows import read_chat_file  # the foundation's sft_datasets reader

    assert [r["messages"] for r in read_chat_file(tmp_path / "other.jsonl", ValueError)] == expected


@pytest.mark.parametrize("row, words", [
    ({"conversations": [{"from": "human", "value": "q"}, {"from": "observation", "value": "x"}]},
     ["a ShareGPT row", "conversations[1].from 'observation' has no mapping", "gpt|assistant|chatgpt|model"]),
    ({"instruction": "q", "input": ""}, ["an alpaca row (instruction/input/output)", "'output' must be"]),
    ({**SHAREGPT, "messages": CHAT[0]["messages"]}, ["a row in one format only"]),
])
def test_unmappable_rows_are_refused_naming_file_line_and_format(tmp_path, row, words):
    path = jsonl(tmp_path / "d.jsonl", [CHAT[0], row])
    with pytest.raises(rows.RowError) as refused:
        rows.read_chat_jsonl(path, "train")
    message = str(refused.value)
    assert message.startswith(f"{path}:2: ") and all(word in message for word in words), message


@pytest.mark.parametrize("row, words", [
    (SHAREGPT, ["this is a ShareGPT row ('conversations' with 'from'/'value')", "human|user → user"]),
    (ALPACA, ["this is an alpaca row (instruction/input/output)", "output → assistant"]),
])
def test_the_general_set_refuses_them_naming_the_format_and_mapping(tt_in, tmp_path, row, words):
    message = general_set_refusal(tt_in, tmp_path, (json.dumps(CHAT[2]) + "\n" + json.dumps(row) + "\n").encode())
    assert "general.jsonl:2: " in message and all(word in message for word in words), message


@pytest.mark.parametrize("row, key", [
    ({**ALPACA, "history": [["Add 1 and 1.", "2"]]}, "history"),
    ({**SHAREGPT, "system": "You are a pirate."}, "system"),
    ({**SHAREGPT, "tools": '[{"name": "search"}]'}, "tools"),
], ids=["alpaca history", "sharegpt system", "sharegpt tools"])
def test_turns_carried_by_history_system_or_tools_are_refused_by_tt_validate_never_dropped(tt, tmp_path, row, key):
    """LLaMA-Factory's `history`, `system` and `tools` keys carry turns or context: refused naming file:line and
    the key (exit 2, nothing created), never dropped; left empty, they carry nothing and the row is read."""
    from conftest import write_spec

    folder = tmp_path / "s"
    data = jsonl(folder / "train.jsonl", [CHAT[0], row, CHAT[2]])
    spec = {"name": "rows", "engine": "adapter", "base_model": "org/tiny",
            "base_model_revision": "0123456789abcdef0123456789abcdef01234567", "system_prompt": "Answer briefly.",
            "datasets": {"train": "train.jsonl"},
            "examples": [{"input": f"Capital of country {i}?", "output": f"City {i}"} for i in range(10)]}
    path = write_spec(folder, spec)
    code, out = tt.json("validate", path)
    message = json.dumps(out, ensure_ascii=False)
    assert code == 2 and f"{data}:2: " in message and f"'{key}' holds" in message, out
    assert sorted(p.name for p in folder.iterdir()) == ["train.jsonl", "tunedtensor.json"]
    jsonl(data, [CHAT[0], {**row, key: [] if key == "history" else ""}, CHAT[2]])
    code, out = tt.json("validate", path)
    assert code == 0, out
