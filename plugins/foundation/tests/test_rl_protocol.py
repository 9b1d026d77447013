"""RL refuses specs whose rewards could never be non-zero; the protocol's exit codes and atomic result."""

import json
import subprocess
import sys

import pytest

from tt_engine_foundation.runtime import tokenizer as T
from tt_stagekit.protocol import InvalidInput
from tt_engine_foundation.runtime.rl import check_reachable, max_new_tokens

from conftest import train_rows


def _tok():
    return T.train(iter(["What is 3 plus 4? 7. Answer with the sum only."] * 20), 300)


def test_rl_refuses_unreachable_answers():
    tok = _tok()
    rows = train_rows(4)
    check_reachable(tok, rows, max_new_tokens(tok, rows, 64))  # short numeric answers: fine
    long_rows = [{"id": "x", "messages": [{"role": "user", "content": "q"},
                                          {"role": "assistant", "content": "word " * 200}]}]
    with pytest.raises(InvalidInput, match="would be zero"):
        check_reachable(tok, long_rows, max_new_tokens(tok, long_rows, 32))
    with pytest.raises(InvalidInput, match="needs training rows"):
        check_reachable(tok, [], 16)


def test_bad_request_exits_2_with_an_error_event(tmp_path):
    bad = tmp_path / "request.json"
    bad.write_text("{not json")
    proc = subprocess.run([sys.executable, "-m", "tt_engine_foundation.stages.tokenizer", str(bad)],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    event = json.loads(proc.stdout.strip().splitlines()[-1])
    assert event["type"] == "log" and event["level"] == "error" and "request.json:1" in event["message"]


@pytest.mark.parametrize("change, message", [
    ({"batch_size": "8"}, "request.spec.foundation.batch_size: expected an integer, got '8' (string)"),
    ({"bf16": 1}, "request.spec.foundation.bf16: expected true or false, got 1 (integer)"),
    ({"vocab_sise": 320}, "request.spec.foundation.vocab_sise: unknown to this engine's runtime"),
])
def test_a_wrong_setting_exits_2_naming_the_field_before_any_work(tmp_path, change, message):
    """The stage parses its request once into frozen dataclasses (runtime/config.py) before doing anything."""
    from conftest import run_stage, tiny_config

    out = run_stage(tmp_path, "tokenizer", tiny_config(**change))
    assert out.code == 2
    assert [m for m in out.logs("error")][0].startswith(message)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tokenizer"]
    assert sorted(p.name for p in (tmp_path / "tokenizer").iterdir()) == ["request.json"]  # nothing trained
