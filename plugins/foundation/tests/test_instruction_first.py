"""Instruction first at sequence_length 64: SFT rows, RL/eval prompts and the exact length check (exit 2)."""

from __future__ import annotations

import json
import re

import pytest

from tt_engine_foundation.runtime import tokenizer as T
from tt_engine_foundation.runtime.chat import check_fits, fit_prompt
from tt_engine_foundation.runtime.rl import fit_prompts, max_new_tokens
from tt_engine_foundation.runtime.sft import build_examples
from tt_stagekit.protocol import InvalidInput

from conftest import make_request, run_stage, tiny_config

INSTRUCTION = ("Answer with the sum only. Write the number in digits, with no words, no units and no "
               "punctuation. Never explain the steps, never repeat the question, and never add a greeting.")
LONG_INSTRUCTION = INSTRUCTION + (" Read the question twice. If the question has two numbers, add them; if "
                                  "it has none, answer 0. Do not round, and keep any minus sign in front.")


@pytest.fixture(scope="module")
def tok():
    corpus = [f"{a} plus {b} is {a + b}. What is {a} plus {b}? Answer with the number." for a in range(30)
              for b in range(0, 30, 7)]
    return T.train(iter(corpus * 3 + [INSTRUCTION, LONG_INSTRUCTION] * 5), 512)  # the spec's text, as the stage


def _row(i: int, user: str, answer: str, system: str = INSTRUCTION) -> dict:
    return {"id": f"r{i}", "messages": [{"role": "system", "content": system}, {"role": "user", "content": user},
                                        {"role": "assistant", "content": answer}]}


def _instruction_ids(tok, system: str = INSTRUCTION) -> list[int]:
    return ([T.special_id(tok, T.BOS), T.special_id(tok, T.SYSTEM_START)] + T.encode(tok, system)
            + [T.special_id(tok, T.SYSTEM_END)])


def test_every_sft_row_starts_with_the_full_instruction_and_ends_with_the_answer(tok):
    assert 35 <= len(T.encode(tok, INSTRUCTION)) <= 45
    users = ["What is 2 plus 3?", "What is 12 plus 13? " * 3, "Please add these numbers for me: " * 10 + "7 plus 8?",
             "x " * 300 + "What is 1 plus 1?"]
    answers = ["5", "25", "15", "2"]
    rows = [_row(i, u, a) for i, (u, a) in enumerate(zip(users, answers))]
    examples, trimmed = build_examples(tok, rows, 64)
    prefix = _instruction_ids(tok)
    for (ids, mask), answer in zip(examples, answers):
        assert len(ids) <= 65  # 64 positions: inputs and their next-token targets
        assert ids[: len(prefix)] == prefix  # the whole instruction, first
        supervised = [t for t, m in zip(ids, mask) if m]
        assert supervised == T.encode(tok, answer) + [T.special_id(tok, T.ASSISTANT_END)]
        assert ids[-len(supervised):] == supervised and mask[-len(supervised):] == [1] * len(supervised)
        assert T.special_id(tok, T.USER_START) in ids  # a user turn is always there, however short
    full = [len(T.encode(tok, u)) + len(prefix) + len(T.encode(tok, a)) + 4 for u, a in zip(users, answers)]
    assert trimmed == sum(n > 65 for n in full) >= 2
    # a trimmed row keeps the end of the user text (the question nearest the answer)
    last_ids, _ = examples[-1]
    assert "What is 1 plus 1?" in T.decode(tok, last_ids)


def test_a_70_token_instruction_is_refused_naming_the_setting_and_the_length(tok):
    assert 60 <= len(T.encode(tok, LONG_INSTRUCTION)) <= 80
    with pytest.raises(InvalidInput, match=r"foundation.sequence_length is 64, but .* need (\d+) tokens") as caught:
        build_examples(tok, [_row(0, "What is 2 plus 3?", "5", LONG_INSTRUCTION)], 64)
    needed = int(re.search(r"need (\d+) tokens", str(caught.value)).group(1))
    examples, trimmed = build_examples(tok, [_row(0, "What is 2 plus 3?", "5", LONG_INSTRUCTION)], needed)
    assert trimmed == 1 and len(examples[0][0]) == needed + 1  # at that length: an empty user message
    with pytest.raises(InvalidInput, match=f"need {needed} tokens"):
        check_fits(tok, 64, LONG_INSTRUCTION, ["5"])
    check_fits(tok, 64, INSTRUCTION, ["5"])


def test_rl_and_eval_prompts_keep_the_instruction_and_the_answer_budget_never_cuts_it(tok):
    rows = [_row(i, "Please add: " * 40 + f"What is {i} plus 2?", str(i + 2)) for i in range(3)]
    budget = max_new_tokens(tok, rows, 64)
    prompts, trimmed = fit_prompts(tok, rows, 64 - budget)
    assert trimmed == 3 and budget >= len(T.encode(tok, "4")) + 1
    for ids in prompts:
        assert ids[: len(_instruction_ids(tok))] == _instruction_ids(tok) and len(ids) <= 64 - budget
        assert ids[-1] == T.special_id(tok, T.ASSISTANT_START)
    # the budget shrinks rather than cut the instruction
    near = INSTRUCTION + " Read the question twice. If the question has two numbers, add them;"
    tight = max_new_tokens(tok, [_row(0, "q", "5", near)], 64)
    assert tight == 64 - (len(_instruction_ids(tok, near)) + 3) < len(T.encode(tok, "5")) + 8
    ids, cut = fit_prompt(tok, _row(0, "What is 2 plus 3?", "5", near)["messages"], 64 - tight)
    assert ids[: len(_instruction_ids(tok, near))] == _instruction_ids(tok, near) and cut


def test_tokenizer_stage_exits_2_before_writing_anything(tmp_path, corpus):
    run_dir = tmp_path / "run"
    cfg = tiny_config(corpus_path=str(corpus), sequence_length=64, vocab_size=300, tokenizer_max_chars=20_000)
    request = make_request(run_dir, "tokenizer", cfg)
    data = json.loads(request.read_text())
    data["system_message"] = LONG_INSTRUCTION
    request.write_text(json.dumps(data))
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "tt_engine_foundation.stages.tokenizer", str(request)],
                          capture_output=True, text=True, cwd=run_dir)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "foundation.sequence_length is 64" in proc.stdout
    assert not (run_dir / "tokenizer" / "tokenizer.json").exists()
    # the same request with the short instruction trains the tokenizer
    ok = run_stage(tmp_path / "ok", "tokenizer", cfg)
    assert ok.code == 0, ok.text
