"""The synthesis filter drops a teacher's input that is a held-out prompt under the one key
(tt_stagekit.sameness): with a zero-width character, a word joiner, a Cyrillic look-alike letter or a
changed final mark, it is still the held-out prompt and never reaches training (docs/synthesis.md)."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import echo_spec, write_spec
from teacher_stub import StubTeacher
from test_synthesis import synth_spec

from tt_host.spec.split import normalize_prompt


def disguises(prompt: str) -> list[str]:
    """The held-out prompt as a teacher could hand it back, each one a twin under the key."""
    words = prompt.split(" ")
    return [" \u200b".join(words), words[0] + "\u2060 " + " ".join(words[1:]),
            prompt.replace("a", "\u0430", 1), prompt.rstrip("?") + ".", prompt.rstrip("?")]


def test_disguised_held_out_prompts_from_the_teacher_never_reach_training(tt, tmp_path):
    prompts = [example["input"] for example in echo_spec()["examples"]]
    with StubTeacher(echo=[d for p in prompts for d in disguises(p)]) as stub:
        code, out = tt.json("run", write_spec(tmp_path / "s", synth_spec(stub.url, rows=12)))
    assert code == 0, out
    run = Path(out["run_dir"])
    held_prompts = [p["messages"][1]["content"]
                    for p in json.loads((run / "evaluate" / "request.json").read_text())["eval_prompts"]]
    held = {normalize_prompt(p) for p in held_prompts}
    assert held, "the spec holds examples out"
    trained = json.loads((run / "train" / "request.json").read_text())["train_rows"]
    synthetic = [r["messages"][1]["content"] for r in trained if r.get("source") == "synthetic"]
    assert len(synthetic) == 12
    assert not [p for p in synthetic if normalize_prompt(p) in held], "a disguised held-out prompt was trained on"
    assert not [p for p in synthetic for d in (x for h in held_prompts for x in disguises(h)) if p == d]
    metrics = json.loads((run / "report.json").read_text())["metrics"]
    # each held-out prompt came back in 5 disguises (+ case/spacing copies) per input round: all dropped as held_out
    assert metrics["synthesize.dropped.held_out"] >= 5 * len(held)
