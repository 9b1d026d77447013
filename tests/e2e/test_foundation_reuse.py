"""Reuse of finished stages through `tt run` (one small completed CPU run shared by every test):

- more examples and more SFT steps re-run SFT onward and reuse tokenizer, token cache, pretraining and
  BPB, whose files stay untouched; a changed depth is refused (exit 2, naming foundation.depth) with
  nothing changed; `tt run --dry-run` predicts both and creates nothing;
- SFT and RL started from that run's pretrained model (foundation.init_model, by its registered id)
  complete without a tokenizer, token cache, pretraining or BPB stage;
- silent limits made visible: the token-cache and BPB cuts are warnings in the logs and notes in the report;
- `tt runs report` lists the pretraining checkpoints kept, each with the reason it was saved;
- the shared run enables the shipped tracker observers (spec `observers` block): TensorBoard's own reader loads the
  pretraining loss series from the run folder, MlflowClient reads back the params and final metrics (host-scored
  included), and the W&B offline run records the same (tests/tracker_support.py).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from foundation_support import report, snapshot, tiny_spec, tt
from tracker_support import mlflow_run, tensorboard_scalars, wandb_offline_run

PRETRAINING = ("tokenizer", "token_cache", "pretrain", "bpb")


@pytest.fixture(scope="module")
def done(tmp_path_factory):
    """A completed run: 30 pretraining steps, 3 SFT steps; max_chars and bpb_max_chars cut their text."""
    base = tmp_path_factory.mktemp("reuse")
    spec = tiny_spec(base / "spec", pretrain_steps=30, checkpoint_interval_steps=10, max_chars=20_000,
                     bpb_max_chars=1_000)
    data = json.loads(spec.read_text())  # the run also feeds the three shipped trackers (offline, local stores)
    data["observers"] = {"tensorboard": {}, "mlflow": {"tracking_uri": (base / "mlruns").as_uri()}, "wandb": {}}
    spec.write_text(json.dumps(data, indent=2))
    run_dir = base / "run"
    proc = tt(base, "run", spec, "--resume", run_dir, "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "observer" not in proc.stderr, proc.stderr  # every tracker worked
    return base, spec, run_dir


def variant(spec: Path, name: str, examples: int = 0, **foundation) -> Path:
    """A copy of the spec beside it (same corpus paths) with more examples and changed settings."""
    data = json.loads(spec.read_text())
    data.pop("observers", None)  # the trackers are checked on the shared run only
    for i in range(examples):
        data["examples"].append({"input": f"What is {20 + i} plus 1?", "output": str(21 + i)})
    data["foundation"].update(foundation)
    path = spec.parent / name
    path.write_text(json.dumps(data, indent=2))
    return path


def files(root: Path, *folders: str) -> dict[str, tuple[int, str]]:
    """mtime and sha256 of every file under the folders."""
    out = {}
    for folder in folders:
        for path in sorted((root / folder).rglob("*")):
            if path.is_file():
                out[str(path.relative_to(root))] = (path.stat().st_mtime_ns, hashlib.sha256(path.read_bytes()).hexdigest())
    return out


def dry_run(base: Path, spec: Path, run_dir: Path) -> tuple[int, dict]:
    proc = tt(base, "run", spec, "--resume", run_dir, "--dry-run", "--json")
    return proc.returncode, json.loads(proc.stdout)


def test_more_examples_and_sft_steps_rerun_sft_onward_and_reuse_pretraining(done, tmp_path):
    base, spec, original = done
    more = variant(spec, "more.json", examples=1, finetune_steps=4)
    before_dry = snapshot(original)
    code, plan = dry_run(base, more, original)
    assert code == 0, plan
    actions = {s["stage"]: s["action"] for s in plan["stages"]}
    assert actions == {"tokenizer": "reuse", "token_cache": "reuse", "pretrain": "reuse", "bpb": "reuse",
                       "sft": "rerun", "rl": "skip", "chat_eval": "rerun", "general_baseline": "rerun"}, plan
    sft_reason = next(s["reason"] for s in plan["stages"] if s["stage"] == "sft")
    assert "foundation.finetune_steps" in sft_reason and "examples" in sft_reason
    assert snapshot(original) == before_dry  # the dry run wrote nothing

    run_dir = tmp_path / "run"
    shutil.copytree(original, run_dir)  # copy2 keeps every mtime
    kept = files(run_dir, *PRETRAINING)
    assert any("pretrain-tokens.bin" in name for name in kept) and any("checkpoints" in name for name in kept)
    proc = tt(base, "run", more, "--resume", run_dir)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert files(run_dir, *PRETRAINING) == kept  # not one byte or mtime changed
    stages = report(run_dir)["stages"]
    assert {name: stages[name]["this_run"] for name in PRETRAINING} == dict.fromkeys(PRETRAINING, "reused")
    assert stages["sft"]["this_run"] == "ran again" and stages["chat_eval"]["this_run"] == "ran again"
    assert report(run_dir)["metrics"]["sft.steps"] == 4
    markdown = (run_dir / "report.md").read_text()
    assert "| pretrain | completed | reused |" in markdown


def test_changed_depth_is_refused_naming_it_and_nothing_changes(done):
    base, spec, run_dir = done
    deeper = variant(spec, "deeper.json", examples=1, depth=3)
    before = snapshot(run_dir)
    mtimes = {p: p.stat().st_mtime_ns for p in run_dir.rglob("*") if p.name != ".tt-run.lock"}
    code, plan = dry_run(base, deeper, run_dir)
    assert code == 2 and not plan["ok"], plan
    pretrain = next(s for s in plan["stages"] if s["stage"] == "pretrain")
    assert pretrain["action"] == "refuse" and "foundation.depth" in pretrain["reason"]
    refused = tt(base, "run", deeper, "--resume", run_dir)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "foundation.depth" in refused.stderr and "new run directory" in refused.stderr
    assert snapshot(run_dir) == before
    assert {p: p.stat().st_mtime_ns for p in run_dir.rglob("*") if p.name != ".tt-run.lock"} == mtimes
    fresh = tt(base, "run", deeper, "--dry-run", "--json")  # a new run: every stage would run, nothing made
    assert fresh.returncode == 0 and {s["action"] for s in json.loads(fresh.stdout)["stages"]} == {"run", "skip"}
    assert not (spec.parent / ".tuned-tensor").exists()


def test_cuts_are_warned_in_the_logs_and_noted_in_the_report(done):
    _, _, run_dir = done
    notes = report(run_dir)["notes"]
    assert any("foundation.max_chars = 20000" in n for n in notes), notes
    assert any("foundation.bpb_max_chars = 1000" in n for n in notes), notes
    assert "foundation.max_chars = 20000" in (run_dir / "logs" / "token_cache.log").read_text()
    assert "foundation.bpb_max_chars = 1000" in (run_dir / "logs" / "bpb.log").read_text()
    assert "bpb_max_chars" in (run_dir / "report.md").read_text()


def test_tt_runs_report_shows_the_checkpoints_kept_with_their_reasons(done):
    base, _, run_dir = done
    shown = tt(base, "runs", "report", run_dir)  # to a pipe: report.md itself
    assert shown.returncode == 0, shown.stderr
    assert (f"checkpoints kept in {run_dir / 'pretrain/recovery/checkpoints'}: step-000000030 (stage_end), "
            "step-000000020 (interval), step-000000010 (interval)") in shown.stdout, shown.stdout


def test_sft_and_rl_from_an_existing_foundation_model_skip_pretraining(done, tmp_path):
    base, spec, source = done
    base_id = next(m["id"] for m in report(source)["models"] if m["kind"] == "foundation-base")
    # depth and vocab_size are the model's own; a longer sequence than pretraining leaves RL room to answer
    tuned = tiny_spec(tmp_path / "tuned", corpus_path=None, validation_path=None, init_model=base_id,
                      finetune_steps=3, rl_steps=2, depth=7, vocab_size=999, sequence_length=128)
    run_dir = tmp_path / "run"
    proc = tt(base, "run", tuned, "--resume", run_dir, "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    state = json.loads((run_dir / "run.json").read_text())
    assert {name: state["stages"][name]["state"] for name in PRETRAINING} == dict.fromkeys(PRETRAINING, "skipped")
    assert all(state["stages"][name]["state"] == "completed" for name in ("sft", "rl", "chat_eval"))
    assert not (run_dir / "pretrain").exists() and not (run_dir / "tokenizer").exists()
    out = report(run_dir)
    assert out["metrics"]["sft.steps"] == 3 and out["metrics"]["rl.steps"] == 2 and "chat_eval.count" in out["metrics"]
    assert any("started from the foundation model" in n for n in out["notes"]), out["notes"]
    assert (run_dir / "sft" / "model" / "tokenizer.json").read_bytes() == \
        (source / "pretrain" / "model" / "tokenizer.json").read_bytes()
    # a corpus beside init_model would be silently unused: refused, naming it
    both = variant(tuned, "both.json", corpus_path="corpus.jsonl")
    refused = tt(base, "validate", both)
    assert refused.returncode == 2 and "foundation.corpus_path is not used" in refused.stdout + refused.stderr


def test_the_run_reached_tensorboard_mlflow_and_wandb(done):
    base, _, run_dir = done
    out = report(run_dir)
    state = json.loads((run_dir / "run.json").read_text())
    scored = {k: v for k, v in out["metrics"].items() if k.startswith("chat_eval.") and k != "chat_eval.seconds"}
    assert "chat_eval.exact_match" in scored, out["metrics"]  # the host's score of the evaluating stage

    scalars = tensorboard_scalars(run_dir / "tensorboard")
    losses = scalars["pretrain/loss"]
    assert [step for step, _ in losses] == list(range(1, 31)) and all(loss > 0 for _, loss in losses)
    assert scalars["scores/chat_eval.exact_match"] == [(0, pytest.approx(scored["chat_eval.exact_match"]))]
    assert scalars["final/sft.steps"] == [(0, 3.0)]

    client, run = mlflow_run((base / "mlruns").as_uri(), "tiny-foundation")
    assert run.data.params["spec_name"] == "tiny-foundation" and run.data.params["engine"] == "foundation"
    assert run.data.params["system_message_sha256"] == state["system_message_sha256"]
    assert run.data.params["foundation.depth"] == "2" and run.data.tags["tt.status"] == "completed"
    assert run.info.status == "FINISHED" and run.info.run_name == state["id"]
    for name, value in scored.items():
        assert run.data.metrics[name] == pytest.approx(value), name
    assert [m.step for m in client.get_metric_history(run.info.run_id, "pretrain.loss")] == list(range(1, 31))

    wandb = wandb_offline_run(run_dir)
    assert wandb["config"]["spec_name"] == "tiny-foundation"
    assert wandb["config"]["system_message_sha256"] == state["system_message_sha256"]
    assert [row["pretrain/step"] for row in wandb["history"] if "pretrain/loss" in row] == list(range(1, 31))
    assert wandb["summary"]["chat_eval.exact_match"] == pytest.approx(scored["chat_eval.exact_match"])
    assert wandb["summary"]["tt/status"] == "completed" and wandb["exit_code"] == 0
