"""The base side of a foundation run: stage `general_baseline` answers the held-out prompts with the base model
SFT starts from (this run's pretrained model), as `chat_eval` answers them with the tuned one, so the host scores
both and the run's verdict reads base → tuned (docs/foundation.md "Held-out evaluation")."""

import json

from conftest import eval_prompts, prepare, run_stage, tiny_config, write_corpus


def test_the_base_model_answers_the_held_out_prompts_before_sft(tmp_path):
    cfg = tiny_config(corpus_path=str(write_corpus(tmp_path / "corpus.jsonl")), pretrain_steps=6, finetune_steps=2)
    run = tmp_path / "run"
    prepare(run, cfg)
    assert run_stage(run, "pretrain", cfg).code == 0
    base = run_stage(run, "general_baseline", cfg)
    assert base.code == 0, base.text
    result = json.loads((run / "general_baseline/result.json").read_text())
    assert result["predictions"] == "predictions.jsonl" and result["outputs"]["model"] == str(run / "pretrain/model")
    rows = [json.loads(line) for line in (run / "general_baseline/predictions.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == [p["id"] for p in eval_prompts()], rows
    assert all(isinstance(r["prediction"], str) for r in rows)
    assert "answered 3 held-out prompts with the pretrained model" in base.logs(), base.text
    assert result["metrics"]["general_baseline.generated"] == 3

    assert run_stage(run, "sft", cfg).code == 0  # the tuned side: the SFT model, the same prompts
    tuned = run_stage(run, "chat_eval", cfg)
    assert tuned.code == 0, tuned.text
    outputs = json.loads((run / "chat_eval/result.json").read_text())["outputs"]
    assert outputs["model"] == str(run / "sft/model") and "answered 3 held-out prompts with the sft model" in tuned.logs()
