"""The shipped tuning examples on the real base, briefly, with the real `tt`: examples/adapter-dpo (SFT then DPO on
derived pairs) and examples/adapter-grpo (SFT then GRPO), each copied as git tracks it, pointed at the real base
(scripts/real-base, linked as `scripts/quickstart --dpo/--grpo` links it) and run with a few steps per stage by
`--set`. The whole chain runs (train, sft, the tuning stages, candidate) and the verdict has three sides: base,
SFT and the tuned model. What the full settings measure is in docs/performance.md ("Tuning examples"); this test
checks that the examples run as shipped, not that they help.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from adapter_support import engine_python, tt
from example_copy_support import tracked_copy

REPO = Path(__file__).resolve().parents[2]
# SFT as shipped (10 steps): after 2 steps every sample fails the label grader, which leaves DPO no pair and
# GRPO's probe no spread (both refuse, exit 2); the held-out sides and the tuning stages are cut short
SHORT = ["hyperparameters.max_eval_examples=6"]
CASES = {
    "adapter-dpo": (["preference.max_steps=2", "preference.samples_per_prompt=2"],
                    ("train", "sft", "reference", "preference", "candidate")),
    "adapter-grpo": (["reinforcement.steps=2", "reinforcement.probe_groups=2"],
                     ("train", "sft", "reinforce", "candidate")),
}


@pytest.fixture(scope="module")
def real_base(tmp_path_factory) -> Path:
    """The real base built by scripts/real-base with the adapter engine's python (fails, never skips)."""
    home = tmp_path_factory.mktemp("real-base")
    python = engine_python(home)
    done = subprocess.run([str(REPO / "scripts" / "real-base")], capture_output=True, text=True, timeout=1800,
                          env={**os.environ, "TT_REAL_BASE_PYTHON": python})
    assert done.returncode == 0, f"scripts/real-base failed (exit {done.returncode}):\n{done.stderr[-3000:]}"
    return Path(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("example", sorted(CASES))
def test_the_tuning_example_runs_its_chain_on_the_real_base_and_the_verdict_has_three_sides(tmp_path, real_base,
                                                                                             example):
    sets, stages = CASES[example]
    folder = tracked_copy(f"examples/{example}", tmp_path / example)
    spec = json.loads((folder / "tunedtensor.json").read_text())
    (folder / spec["base_model"]).symlink_to(real_base)  # as scripts/quickstart links it
    run = tmp_path / "run"
    args = [a for s in SHORT + sets for a in ("--set", s)]
    proc = tt(tmp_path, "run", folder / "tunedtensor.json", "--device", "cpu", "--resume", run, *args, "--json")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(proc.stdout)["report"]
    ran = json.loads((run / "run.json").read_text())["stages"]
    assert all(ran[s]["state"] == "completed" for s in stages), {s: ran.get(s, {}).get("state") for s in stages}
    assert set(report["held_out_sides"]) == {"baseline", "sft", "candidate"}
    assert " (SFT) → " in report["verdict"], report["verdict"]
    assert "tuning" in report and "## Base, SFT and final" in (run / "report.md").read_text()
    tuning = "preference" if "preference" in stages else "reinforce"
    weights = "adapter_model.safetensors"
    assert (Path(report["models"][0]["path"]) / weights).read_bytes() == (run / tuning / "adapter" / weights).read_bytes()
