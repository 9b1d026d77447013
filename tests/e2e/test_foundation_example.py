"""examples/foundation runs end to end on CPU through `tt run` and reports every metric; the tuned model answers
most held-out prompts exactly, the verdict reads base → tuned, the replay loss is charted, and no held-out
question is in its corpus."""

from __future__ import annotations

import json
import math
import re

from example_copy_support import tracked_copy
from foundation_support import REPO, tt

# Held-out exact match measured with the spec's SFT (400 steps at 5e-4, 4 corpus rows replayed per step; README.md):
# 7/11 at the spec's seed 1337, 6/11 at seeds 2 and 3, 5/11 at seed 4. The floor (5 of 11) fails when SFT forgets
# the pretrained sums (finetune_learning_rate 2e-3 for 200 steps without replay: 2/11 at seed 1337).
EXACT_MATCH_FLOOR = 0.4
REQUIRED = [
    "pretrain.final_loss", "pretrain.tokens_per_second", "pretrain.steps", "bpb.value", "bpb.source",
    "sft.final_loss", "chat_eval.exact_match", "chat_eval.count", "rl.mean_reward",
]


def test_example_runs_end_to_end_on_cpu(tmp_path):
    example = tmp_path / "example"
    tracked_copy("examples/foundation", example)
    run_dir = tmp_path / "run"
    proc = tt(tmp_path, "run", example / "tunedtensor.json", "--device", "cpu", "--resume", run_dir, "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((run_dir / "report.json").read_text())
    metrics = report["metrics"]
    missing = [name for name in REQUIRED if name not in metrics]
    assert not missing, f"missing metrics {missing} in {sorted(metrics)}"
    assert report["engine"] == "foundation" and report["status"] == "completed"
    assert metrics["bpb.source"] == "validation"
    assert math.isfinite(metrics["bpb.value"]) and 0 < metrics["bpb.value"] < 8
    spec = json.loads((example / "tunedtensor.json").read_text())
    assert metrics["pretrain.steps"] == spec["foundation"]["pretrain_steps"]
    assert metrics["pretrain.tokens_per_second"] > 0 and math.isfinite(metrics["pretrain.final_loss"])
    assert 0 <= metrics["rl.mean_reward"] <= 1 and metrics["chat_eval.count"] >= 1
    predictions = [json.loads(l) for l in (run_dir / "chat_eval" / "predictions.jsonl").read_text().splitlines()]
    assert len(predictions) == metrics["chat_eval.count"] and all(set(p) == {"id", "prediction"} for p in predictions)
    markdown = (run_dir / "report.md").read_text()
    assert "bpb.value" in markdown and "pretrain.loss" in markdown
    for name in ("tokenizer/tokenizer.json", "pretrain/recovery/pretrain-tokens.bin",
                 "pretrain/recovery/training-metrics.jsonl", "pretrain/model/model.safetensors",
                 "pretrain/model/config.json", "sft/model/model.safetensors", "rl/model/model.safetensors"):
        assert (run_dir / name).is_file(), name
    config = json.loads((run_dir / "pretrain/model/config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    held_out = {p["id"]: p["prediction"] for p in predictions}
    assert metrics["chat_eval.exact_match"] >= EXACT_MATCH_FLOOR, (metrics["chat_eval.exact_match"], held_out)


def test_example_reports_base_to_tuned_and_the_replay_loss(tmp_path):
    """The verdict reads base → tuned (the pretrained model, before SFT, answered the same held-out prompts), the
    predictions table has both answers, and the replay loss is a series report.html charts beside the chat loss.
    The same run as above at its size; a shorter SFT keeps it cheap (the figures are not checked here)."""
    example = tmp_path / "example"
    tracked_copy("examples/foundation", example)
    run_dir = tmp_path / "run"
    proc = tt(tmp_path, "run", example / "tunedtensor.json", "--device", "cpu", "--resume", run_dir,
              "--set", "foundation.pretrain_steps=60", "--set", "foundation.finetune_steps=20",
              "--set", "foundation.log_interval_steps=5")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((run_dir / "report.json").read_text())
    metrics = report["metrics"]
    assert report["held_out_sides"] == {"baseline": "baseline", "candidate": "chat_eval"}, report.get("held_out_sides")
    assert metrics["baseline.count"] == metrics["chat_eval.count"] == 11, metrics
    base, tuned = round(metrics["baseline.exact_match"] * 11), round(metrics["chat_eval.exact_match"] * 11)
    verdict = f"held-out exact match {base}/11 → {tuned}/11"  # then the grader score, when graded, and the gate
    assert report["verdict"].startswith(verdict) and " · no gate configured · " in report["verdict"], report["verdict"]
    assert verdict in proc.stdout.strip().splitlines()[-1], proc.stdout[-500:]  # tt run's last line
    markdown = (run_dir / "report.md").read_text()
    assert verdict in markdown.splitlines()[2]  # report.md's first line under its title
    # Base versus tuned pairs the base side with the tuned one scored as chat_eval
    assert f"| exact_match | {_fmt(metrics['baseline.exact_match'])} | {_fmt(metrics['chat_eval.exact_match'])} |" in markdown
    rows = report["predictions"]
    assert len(rows) == 11 and all(isinstance(r["baseline"], str) and isinstance(r["candidate"], str) for r in rows)
    replay = report_series(run_dir, "sft.corpus_loss")
    assert [step for step, _ in replay] == list(range(1, 21)) and all(math.isfinite(v) for _, v in replay), replay
    page = (run_dir / "report.html").read_text()
    assert "corpus_loss (nats/token)" in page and "sft.corpus_loss" in page  # charted, with its unit
    assert (run_dir / "report-sft-corpus_loss.svg").is_file()


def _fmt(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def report_series(run_dir, name: str) -> list:
    """A series as the sft stage returned it to the host (its result.json), the one the report charts."""
    return json.loads((run_dir / "sft" / "result.json").read_text())["series"][name]


def test_no_held_out_question_is_in_the_corpus():
    """What the floor proves depends on it: make_data.py writes no example's question into the corpus."""
    folder = REPO / "examples" / "foundation"
    spec = json.loads((folder / "tunedtensor.json").read_text())
    corpus = (folder / "corpus.jsonl").read_text()
    questions = []
    for example in spec["examples"]:
        a, b = re.fullmatch(r"What is (\d+) plus (\d+)\?", example["input"]).groups()
        questions += [f"What is {a} plus {b}?", f"What is {b} plus {a}?"]
    asked = [q for q in questions if q in corpus]
    assert not asked and len(spec["examples"]) >= 20, asked
