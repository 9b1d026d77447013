"""The instruction compiler matches the documented format (docs/host.md, Specs) byte for byte; the split is
deterministic (its per-example rule: tests/host/spec/test_split.py)."""

import pytest

from tt_host.spec.compiler import compile_spec, compile_system_message
from tt_stagekit.chatrows import normalize_prompt
from tt_host.spec.schema import BehaviorSpec


def spec(**fields) -> BehaviorSpec:
    fields.setdefault("name", "t")
    return BehaviorSpec(**fields)


def test_all_three_blocks_byte_for_byte():
    s = spec(system_prompt="  You label sentiment.  \n", guidelines=["Be terse", "Use lower case"],
             constraints=["Answer with one word"])
    assert compile_system_message(s) == (
        "You label sentiment.\n\nGuidelines:\n- Be terse\n- Use lower case\n\nConstraints:\n- Answer with one word"
    )


def test_one_block_only():
    assert compile_system_message(spec(guidelines=["Be terse"])) == "Guidelines:\n- Be terse"
    assert compile_system_message(spec(system_prompt="Hi")) == "Hi"
    assert compile_system_message(spec(constraints=["No emoji"])) == "Constraints:\n- No emoji"


def test_no_blocks():
    assert compile_system_message(spec()) == "Follow the demonstrated behavior."
    assert compile_system_message(spec(system_prompt="   ")) == "Follow the demonstrated behavior."


def examples(n):
    return [{"input": f"question {i}", "output": f"answer {i}"} for i in range(n)]


@pytest.mark.parametrize("n", [1, 2, 3, 5, 10, 13])
def test_small_specs_keep_one_example_on_each_side(n):
    compiled = compile_spec(spec(examples=examples(n)))
    assert len(compiled.eval_rows) + len(compiled.train_rows) == n
    assert len(compiled.train_rows) >= 1 and (len(compiled.eval_rows) >= 1 if n >= 2 else not compiled.eval_rows)


def test_split_is_keyed_on_the_spec_not_the_order():
    a = compile_spec(spec(examples=examples(20)))
    b = compile_spec(spec(examples=list(reversed(examples(20)))))
    held_a = {r["messages"][1]["content"] for r in a.eval_rows}
    held_b = {r["messages"][1]["content"] for r in b.eval_rows}
    assert held_a == held_b
    assert held_a.isdisjoint({r["messages"][1]["content"] for r in a.train_rows})
    again = compile_spec(spec(examples=examples(20)))
    assert [r["id"] for r in again.eval_rows] == [r["id"] for r in a.eval_rows]


def test_rows_are_system_user_assistant_and_prompts_hide_answers():
    compiled = compile_spec(spec(system_prompt="S", examples=examples(5)))
    row = compiled.train_rows[0]
    assert [m["role"] for m in row["messages"]] == ["system", "user", "assistant"]
    assert row["messages"][0]["content"] == "S"
    for prompt in compiled.eval_prompts():
        assert [m["role"] for m in prompt["messages"]] == ["system", "user"]
    assert set(compiled.references()) == {r["id"] for r in compiled.eval_rows}


def test_duplicate_prompts_after_normalization_are_rejected():
    assert normalize_prompt("  Ｈello\t  World ") == "hello world"
    with pytest.raises(ValueError, match="examples 0 and 2"):
        compile_spec(spec(examples=[{"input": "Hello  world", "output": "a"}, {"input": "x", "output": "b"},
                                    {"input": " hello WORLD", "output": "c"}]))
