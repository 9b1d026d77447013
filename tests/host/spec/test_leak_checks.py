"""No row enters training (or the general-regression set) sharing a prompt with a spec example, after the one
normalization (tt_host.spec.split.normalize_prompt), in any user turn: foundation `sft_datasets`, adapter prebuilt
`train` / `validation` / `test`, the general set. Refused at `tt validate` / `tt run` naming file:line, exit 2,
nothing created. Host venv only (the adapter spec names a pinned hub id, which validation never downloads)."""

from __future__ import annotations

import json

import pytest

from conftest import write_spec
from tt_engine_adapter.formats.rows import RowError, check_datasets
from tt_host.spec.split import split_examples

REVISION = "0123456789abcdef0123456789abcdef01234567"
EXAMPLES = [{"input": f"What is {i} plus one?", "output": str(i + 1)} for i in range(10)]


def held_out_input() -> str:
    flags = split_examples([e["input"] for e in EXAMPLES], "leaks")
    return next(e["input"] for e, held in zip(EXAMPLES, flags) if held)


def chat(*turns: str) -> dict:
    roles = ["user", "assistant"] * len(turns)
    return {"messages": [{"role": role, "content": text} for role, text in zip(roles, turns)]}


def jsonl(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path.name


def foundation_spec(folder, rows) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    return {"name": "leaks", "engine": "foundation", "system_prompt": "Add one.", "examples": EXAMPLES,
            "foundation": {"sft_datasets": [jsonl(folder / "chat.jsonl", rows)], "finetune_steps": 1}}


@pytest.mark.parametrize("row, what", [
    (chat("  WHAT is {held}  ", "x"), "its prompt equals examples"),
    (chat("hello", "hi", "{held}", "x"), "user turn 2 equals examples"),
])
def test_a_foundation_sft_row_equal_to_a_held_out_example_is_refused_naming_file_and_line(tt, tmp_path, row, what):
    held = held_out_input()
    row = json.loads(json.dumps(row).replace("WHAT is {held}", held.upper()).replace("{held}", held))
    folder = tmp_path / "s"
    path = write_spec(folder, foundation_spec(folder, [chat("Say hi", "hi"), chat("Say bye", "bye"), row]))
    for command in (("validate",), ("run",)):
        code, out = tt.json(*command, path)
        assert code == 2, out
        message = json.dumps(out)
        assert f"{folder / 'chat.jsonl'}:3: {what}[{EXAMPLES.index(next(e for e in EXAMPLES if e['input'] == held))}]" \
            in message, out
    assert sorted(p.name for p in folder.iterdir()) == ["chat.jsonl", "tunedtensor.json"]  # nothing created
    code, out = tt.json("validate", write_spec(folder, foundation_spec(folder, [chat("Say hi", "hi")])))
    assert code == 0, out


def prebuilt(tmp_path, **splits) -> dict:
    return {split: tmp_path / jsonl(tmp_path / f"{split}.jsonl", rows) for split, rows in splits.items()}


def test_adapter_prebuilt_rows_sharing_an_example_prompt_or_duplicating_an_evaluation_prompt_are_refused(tmp_path):
    inputs = [e["input"] for e in EXAMPLES]
    ok = [chat("Say hi", "hi"), chat("Say bye", "bye")]
    check_datasets(prebuilt(tmp_path, train=ok, validation=[chat("Say yes", "yes")]), None, inputs)
    cases = [
        ({"train": ok + [chat(" what IS 3 plus one? ", "4")]}, "train.jsonl:3: prompt overlaps examples[3].input"),
        ({"train": ok + [chat("hi", "hello", "What is 4 plus one?", "5")]}, "train.jsonl:3: user turn 2 equals examples[4]"),
        ({"train": ok, "validation": [chat("What is 5 plus one?", "6")]},
         "validation.jsonl:1: evaluation prompt overlaps examples[5].input"),
        ({"train": ok, "validation": [chat("Say yes", "y"), chat("say  YES", "yes")]},
         "validation.jsonl:2: duplicate evaluation prompt (first at"),
        ({"train": ok, "validation": [chat("Say yes", "y")], "test": [chat("Say yes", "yes")]},
         "test.jsonl:1: duplicate evaluation prompt (first at"),
        ({"train": ok, "test": [chat("Say hi", "hi")]}, "test.jsonl:1: evaluation prompt overlaps training row"),
    ]
    for splits, message in cases:
        with pytest.raises(RowError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
            check_datasets(prebuilt(tmp_path, **splits), None, inputs)


def test_a_general_regression_row_sharing_an_example_prompt_is_refused(tt, tmp_path):
    folder = tmp_path / "s"
    folder.mkdir()
    rows = [chat("Capital of France?", "Paris"), chat("Hi", "Hello", "what is 7 plus ONE?", "8")]
    spec = {"name": "leaks", "engine": "adapter", "base_model": "org/tiny", "base_model_revision": REVISION,
            "examples": EXAMPLES, "evaluation": {"general_regression": {"dataset": jsonl(folder / "general.jsonl", rows)}}}
    code, out = tt.json("validate", write_spec(folder, spec))
    assert code == 2, out
    errors = {e["loc"]: e["msg"] for e in out["errors"]}
    assert f"{folder / 'general.jsonl'}:2: user turn 2 equals examples[7].input" in \
        errors["evaluation.general_regression.dataset"], out
    jsonl(folder / "general.jsonl", rows[:1])
    code, out = tt.json("validate", folder / "tunedtensor.json")
    assert code == 0, out
