"""A foundation spec planned by the host, in process: the stage fingerprints of the foundation engine's chain and
how a finished run of it is planned after a change (tests/host/runs/test_fingerprints.py, and the foundation
settings' tests in tests/host/engine_specs/)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from tt_engine_foundation.plugin import ENGINE
from tt_host.runs.fingerprint import chain
from tt_host.runs.plan import decide
from tt_host.spec.compiler import compile_spec

PRETRAINING = ("tokenizer", "token_cache", "pretrain", "bpb")
TUNING = ("sft", "rl", "chat_eval")


def foundation_spec(folder: Path, corpus: bool = True, examples: int = 6, **block):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "corpus.jsonl").write_text('{"text": "one two three"}\n')
    (folder / "held.jsonl").write_text('{"text": "four five"}\n')
    raw = {
        "name": "fp", "engine": "foundation", "system_prompt": "Add.",
        "examples": [{"input": f"{i} plus 1?", "output": str(i + 1)} for i in range(examples)],
        "foundation": {"corpus_path": "corpus.jsonl", "validation_path": "held.jsonl", "rl_steps": 2,
                       **({} if corpus else {"corpus_path": None, "validation_path": None}), **block},
    }
    spec = ENGINE.spec_model.model_validate(raw, context={"spec_dir": str(folder)})
    return spec, compile_spec(spec)


def prints(spec, compiled) -> dict[str, str]:
    return {stage.name: fingerprint for stage, _, fingerprint in chain(ENGINE, spec, compiled)}


def completed_run_state(spec, compiled, run_dir: Path) -> dict:
    """run.json of a completed run of this spec (every stage completed, result files in place)."""
    stages = {}
    for stage, inputs, fingerprint in chain(ENGINE, spec, compiled):
        result = run_dir / stage.name / "result.json"
        result.parent.mkdir(parents=True, exist_ok=True)
        result.write_text("{}")
        stages[stage.name] = {"state": "completed", "fingerprint": fingerprint, "inputs": inputs,
                              "result_sha256": hashlib.sha256(b"{}").hexdigest()}
    return {"engine": "foundation", "stages": stages}


def sft_onward_decisions_after(tmp_path: Path, **change) -> dict:
    """How a finished run of the default foundation spec is planned after `change` to its foundation block:
    {stage: decision}, asserted to reuse every pretraining stage and rerun every tuning stage."""
    from tt_host.runs.store import RunDir

    run = RunDir(tmp_path / "run")
    state = completed_run_state(*foundation_spec(tmp_path), run.path)
    spec, compiled = foundation_spec(tmp_path, **change)
    decisions = {d.stage: d for d in decide(chain(ENGINE, spec, compiled), state, run, spec)}
    assert [decisions[n].action for n in PRETRAINING] == ["reuse"] * len(PRETRAINING)
    assert [decisions[n].action for n in TUNING] == ["rerun"] * len(TUNING)
    return decisions
