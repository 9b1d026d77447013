"""`tt models activate|active|rollback|history|get` on echo-engine models (host only, fast).

The echo engine has no baseline evaluation, so its runs never run the
general-regression gate: activation needs --force, which the history records.
"""

from __future__ import annotations

import json

from conftest import echo_spec, write_spec


def _model(tt, tmp_path, steps: int) -> str:
    code, out = tt.json("run", write_spec(tmp_path / f"s{steps}", echo_spec(steps=steps)))
    assert code == 0, out
    return out["report"]["models"][0]["id"]


def test_activation_stack_force_and_verification(tt, tmp_path):
    first, second = _model(tt, tmp_path, 2), _model(tt, tmp_path, 3)
    assert tt.json("models", "active")[1]["model"] is None
    code, out = tt.json("models", "rollback")
    assert code == 1 and "nothing to roll back" in out["error"]["message"]

    code, out = tt.json("models", "activate", first)
    assert code == 1 and "the spec configures no gate" in out["error"]["message"] and "--force" in out["error"]["message"]
    assert not (tmp_path / "tt-home" / "activations.jsonl").exists()  # a refusal records nothing
    assert tt.json("models", "activate", first, "--force")[0] == 0
    assert tt.json("models", "activate", second, "--force")[0] == 0
    code, got = tt.json("models", "get", second)
    assert code == 0 and got["active"] is True and got["gate"]["status"] == "not run" and got["kind"] == "echo"
    assert tt.json("models", "get", "no-such-model")[0] == 2
    assert tt.json("models", "activate", "no-such-model", "--force")[0] == 2

    history_file = tmp_path / "tt-home" / "activations.jsonl"
    before = history_file.read_bytes()
    code, back = tt.json("models", "rollback")
    assert code == 0 and back["model"] == first and back["previous"] == second
    assert history_file.read_bytes().startswith(before)  # append-only
    code, back = tt.json("models", "rollback")
    assert code == 0 and back["model"] is None and back["base_of"] == first
    state = tt.json("models", "active")[1]
    assert state["model"] is None and state["base_of"] == first
    history = tt.json("models", "history")[1]["history"]
    assert [(h["action"], h["model"], h.get("forced")) for h in history] == [
        ("activate", first, True), ("activate", second, True), ("rollback", first, None), ("rollback", None, None)]
    assert all(len(json.loads(line)) >= 4 for line in history_file.read_text().splitlines())

    # a model whose files changed is never activated, --force or not
    registry = json.loads((tmp_path / "tt-home" / "models" / f"{second}.json").read_text())
    table = next(p for p in (tmp_path / registry["path"]).rglob("table.json"))
    table.write_text(table.read_text() + " ")
    code, out = tt.json("models", "activate", second, "--force")
    assert code == 1 and "fails verification" in out["error"]["message"] and "table.json" in out["error"]["message"]
    assert tt.json("models", "active")[1]["model"] is None
