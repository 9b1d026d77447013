"""`tt validate` / `tt run` refuse (exit 2, naming the length setting) an instruction that cannot fit the
sequence length with the longest answer and an empty user message. Host venv only: the real `tt` CLI,
no engine environment (the exact check with the real tokenizer is in the engine tests)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from conftest import write_spec

SEVENTY_WORDS = " ".join(f"rule{i}" for i in range(70))
FORTY_WORDS = " ".join(f"rule{i}" for i in range(40))


def _foundation(system_prompt: str) -> dict:
    return {
        "name": "long-instruction", "engine": "foundation", "system_prompt": system_prompt,
        "examples": [{"input": f"What is {i} plus {i + 3}?", "output": str(2 * i + 3)} for i in range(10)],
        "foundation": {"sequence_length": 64, "vocab_size": 320, "depth": 1, "device": "cpu"},
    }


def _adapter(folder: Path, system_prompt: str, pre_tokenizer) -> dict:
    model = folder / "model"
    model.mkdir(parents=True, exist_ok=True)
    (model / "config.json").write_text("{}")
    (model / "tokenizer.json").write_text(json.dumps({"version": "1.0", "pre_tokenizer": pre_tokenizer}))
    return {
        "name": "long-instruction", "engine": "adapter", "base_model": "model", "system_prompt": system_prompt,
        "examples": [{"input": f"review {i}", "output": "positive" if i % 2 else "negative"} for i in range(8)],
        "hyperparameters": {"max_seq_length": 64},
    }


def _refused(tt, path: Path, loc: str, field: str) -> int:
    before = sorted(p.name for p in path.parent.iterdir())
    code, out = tt.json("validate", path)
    assert code == 2, out
    error = next(e for e in out["errors"] if e["loc"] == loc)
    assert f"{field} is 64" in error["msg"] and "empty user message" in error["msg"]
    needed = int(re.search(r"at least (\d+) tokens", error["msg"]).group(1))
    ran = tt("run", path)
    assert ran.returncode == 2 and field in ran.stdout + ran.stderr
    assert sorted(p.name for p in path.parent.iterdir()) == before  # nothing created
    return needed


def test_foundation_seventy_token_instruction_is_refused_naming_sequence_length(tt, tmp_path):
    needed = _refused(tt, write_spec(tmp_path / "long", _foundation(SEVENTY_WORDS)), "foundation",
                      "foundation.sequence_length")
    assert needed == 70 + 7 + 1 - 1  # words + the row's special tokens + the answer, as positions
    code, out = tt.json("validate", write_spec(tmp_path / "ok", _foundation(FORTY_WORDS)))
    assert code == 0, out


def test_adapter_seventy_token_instruction_is_refused_naming_max_seq_length(tt, tmp_path):
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    needed = _refused(tt, write_spec(tmp_path / "long", _adapter(tmp_path / "long", SEVENTY_WORDS, byte_level)),
                      "hyperparameters", "hyperparameters.max_seq_length")
    assert needed == 70 + 1 + 1  # words + the answer's word + its end-of-turn token
    code, out = tt.json("validate", write_spec(tmp_path / "ok", _adapter(tmp_path / "ok", FORTY_WORDS, byte_level)))
    assert code == 0, out
    # a tokenizer that may join words proves nothing here: the prefetch stage counts exactly instead
    unknown = _adapter(tmp_path / "unknown", SEVENTY_WORDS, None)
    code, out = tt.json("validate", write_spec(tmp_path / "unknown", unknown))
    assert code == 0, out
