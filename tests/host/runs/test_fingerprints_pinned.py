"""An upgrade of tt reuses what an unchanged spec already finished: the stage fingerprints of the shipped examples
(with and without the tuning blocks, DDP and RL) are pinned in tests/fixtures/stage-fingerprints.json.

A refactor that moves a setting, a stage module or the way inputs are declared must leave every fingerprint as it
was, or every user's finished stages would run again after the upgrade. A deliberate change (a new input a stage
reads) updates the fixture in the same commit and says so in its message: regenerate it with
`.venv/bin/python -P tests/host/runs/test_fingerprints_pinned.py > tests/fixtures/stage-fingerprints.json`.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
if __name__ == "__main__":  # run as a script (-P): the tests' support modules are not on the path
    sys.path.insert(0, str(REPO / "tests"))
from example_copy_support import tracked_copy  # noqa: E402

PINNED = REPO / "tests" / "fixtures" / "stage-fingerprints.json"

ADAPTER, FOUNDATION = "examples/adapter/tunedtensor.json", "examples/foundation/tunedtensor.json"
CASES: dict[str, tuple[str, list[str]]] = {
    "adapter": (ADAPTER, []),
    "adapter-dpo": (ADAPTER, ['preference={"loss": "dpo"}']),
    "adapter-kto": (ADAPTER, ['preference={"loss": "kto", "beta": 0.2, "learning_rate": 1e-4}']),
    "adapter-grpo": (ADAPTER, ['reinforcement={"steps": 4}']),
    "adapter-ddp": (ADAPTER, ["hyperparameters.nproc_per_node=2"]),
    "adapter-real": ("examples/adapter-real/tunedtensor.json", []),
    "example-adapter-dpo": ("examples/adapter-dpo/tunedtensor.json", []),
    "example-adapter-grpo": ("examples/adapter-grpo/tunedtensor.json", []),
    "foundation": (FOUNDATION, []),
    "foundation-rl": (FOUNDATION, ["foundation.rl_steps=3"]),
    "aof-foundation": ("examples/adapter-on-foundation/foundation/tunedtensor.json", []),
}


def fingerprints(case: str) -> dict[str, str]:
    """Stage name -> fingerprint of one case, computed as `tt run` plans it (the host's own `chain`), on a copy of
    the example's tracked files."""
    from tt_host.plugins import plugins
    from tt_host.runs.fingerprint import chain
    from tt_host.spec.loading import load_spec

    path, overrides = CASES[case]
    with tempfile.TemporaryDirectory() as folder:
        spec = tracked_copy(str(Path(path).parent), Path(folder) / "example") / Path(path).name
        loaded = load_spec(spec, plugins(), overrides=overrides)
        assert not loaded.errors, [str(e) for e in loaded.errors]
        plan = chain(loaded.engine, loaded.spec, loaded.compiled)
    return {planned.stage.name: planned.fingerprint for planned in plan}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_shipped_examples_stage_fingerprints_are_unchanged(case):
    pinned = json.loads(PINNED.read_text(encoding="utf-8"))[case]
    now = fingerprints(case)
    changed = sorted(name for name in set(pinned) | set(now) if pinned.get(name) != now.get(name))
    assert not changed, (f"{case}: the fingerprints of {changed} changed: every finished run of this spec would run "
                         f"those stages again after an upgrade (see this module's docstring)")


if __name__ == "__main__":
    sys.stdout.write(json.dumps({case: fingerprints(case) for case in sorted(CASES)}, indent=1, sort_keys=True) + "\n")
