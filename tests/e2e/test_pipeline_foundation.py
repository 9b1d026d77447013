"""`default-foundation` (the contract's canonical foundation document, written by `tt pipeline init --foundation`)
runs over a CPU-sized foundation spec whose settings match it (depth 2, 2 pretraining steps, batch 2, sequence 64,
2 SFT steps): every stage it names runs, and its three evaluate steps each write evaluations/<step>.json.
"""

from __future__ import annotations

import json

from foundation_support import tiny_spec, tt


def test_default_foundation_runs(tmp_path):
    spec = tiny_spec(tmp_path / "f", pretrain_steps=2, batch_size=2, finetune_steps=2, sequence_length=64,
                     checkpoint_interval_steps=0, warmup_steps=0)
    proc = tt(tmp_path, "pipeline", "init", tmp_path / "f", "--foundation")
    assert proc.returncode == 0, proc.stderr
    proc = tt(tmp_path, "pipeline", "run", "-f", tmp_path / "f" / "tunedtensor.pipeline.json", "--spec", spec,
              "--resume", tmp_path / "run", "--json")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "sft.batchSize is 1" in proc.stderr  # the spec decides; one batch_size for pretraining and SFT
    out = json.loads(proc.stdout)
    ran = {name: stage.get("this_run") for name, stage in out["report"]["stages"].items()}
    assert {name for name, action in ran.items() if action == "ran"} == {
        "tokenizer", "token_cache", "pretrain", "bpb", "sft", "chat_eval", "general_baseline"}, ran
    for step in ("bpb", "chat", "infer"):
        evaluation = json.loads((tmp_path / "run" / "evaluations" / f"{step}.json").read_text())
        assert evaluation["metrics"], (step, evaluation)
