"""`evaluation.general_regression`: the general chat set is checked at `tt validate` with file:line errors.

Host venv only (the adapter spec names a hub id, which `tt validate` does not download)."""

from __future__ import annotations

import json

import pytest

from conftest import echo_spec, write_spec

REVISION = "0123456789abcdef0123456789abcdef01234567"


def chat(user: str, answer: str, system: str | None = "Be helpful.") -> dict:
    messages = [{"role": "system", "content": system}] if system else []
    return {"messages": messages + [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]}


def spec_with(folder, rows: list, **gate) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "general.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return {"name": "g", "engine": "adapter", "base_model": "org/tiny", "base_model_revision": REVISION,
            "examples": [{"input": f"q{i}", "output": f"a{i}"} for i in range(4)],
            "evaluation": {"general_regression": {"dataset": "general.jsonl", **gate}}}


GOOD = [chat("What is 2+2?", "4"), chat("Capital of France?", "Paris")]

CASES = {
    "duplicate prompt": ([*GOOD, chat("  what is 2+2? ", "four")], {}, "general.jsonl:3: duplicate prompt (first at line 1)"),
    "mixed system messages": ([*GOOD, chat("Third?", "3", system="Other.")], {}, "general.jsonl:3: mixed system messages"),
    "system absent on one row": ([*GOOD, chat("Third?", "3", system=None)], {}, "general.jsonl:3: mixed system"),
    "system_prompt differs": (GOOD, {"system_prompt": "Be terse."}, "general.jsonl:1: the embedded system message "
                              "differs from evaluation.general_regression.system_prompt"),
    "no answer": ([GOOD[0], {"messages": [{"role": "user", "content": "hi"}]}], {}, "general.jsonl:2: expected"),
    "bad policy": (GOOD, {"max_score_drop": 2}, None),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_general_set_exits_2_naming_file_and_line(tt, tmp_path, case):
    rows, gate, detail = CASES[case]
    path = write_spec(tmp_path / "s", spec_with(tmp_path / "s", rows, **gate))
    code, out = tt.json("validate", path)
    assert code == 2, out
    locs = {e["loc"]: e["msg"] for e in out["errors"]}
    if detail is None:
        assert "evaluation.general_regression.max_score_drop" in locs, out
    else:
        msg = locs.get("evaluation.general_regression", "")
        assert detail in msg and str(tmp_path / "s" / "general.jsonl") in msg, out
    assert not (tmp_path / "s" / ".tuned-tensor").exists()


def test_good_general_set_validates_and_engine_without_baseline_is_refused(tt, tmp_path):
    no_system = [chat("What is 2+2?", "4", system=None), chat("Capital?", "Paris", system=None)]
    for rows, gate in ((GOOD, {}), (GOOD, {"system_prompt": "Be helpful."}), (no_system, {"system_prompt": "Hi."})):
        code, out = tt.json("validate", write_spec(tmp_path / "ok", spec_with(tmp_path / "ok", rows, **gate)))
        assert code == 0, out
    spec = echo_spec()
    spec["evaluation"] = {"general_regression": {"dataset": "general.jsonl"}}
    code, out = tt.json("validate", write_spec(tmp_path / "ok", spec, "echo.json"))
    assert code == 2 and out["errors"][0]["loc"] == "evaluation.general_regression", out
    assert "baseline" in out["errors"][0]["msg"]
