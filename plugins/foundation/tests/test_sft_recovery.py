"""SFT checkpoints: SIGTERM saves the current step and exits 130; the rerun continues from it and ends with
the weights, loss curve and step count of an uninterrupted run. Changed SFT settings are refused."""

import json
import shutil
import signal

import pytest

from conftest import prepare, run_stage, tiny_config

SFT_MODEL = "sft/model/model.safetensors"


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """Pretraining once, then an uninterrupted SFT run."""
    base = tmp_path_factory.mktemp("sft-ref")
    from conftest import write_corpus

    cfg = tiny_config(corpus_path=str(write_corpus(base / "corpus.jsonl")), pretrain_steps=6, finetune_steps=14,
                      checkpoint_interval_steps=5)
    run = base / "run"
    prepare(run, cfg)
    assert run_stage(run, "pretrain", cfg).code == 0
    out = run_stage(run, "sft", cfg)
    assert out.code == 0, out.text
    return cfg, run


def _pretrained(tmp_path, reference):
    cfg, ref = reference
    run = tmp_path / "run"
    run.mkdir()
    for part in ("tokenizer", "pretrain"):
        shutil.copytree(ref / part, run / part)
    for part in ("tokenizer", "token_cache", "pretrain"):
        (run / part).mkdir(exist_ok=True)
        shutil.copy(ref / part / "result.json", run / part / "result.json")
    return cfg, run


def test_interval_checkpoints_are_written_and_rolled(reference):
    cfg, run = reference
    steps = sorted(p.name for p in (run / "sft/recovery/checkpoints").iterdir())
    assert steps == ["step-000000005", "step-000000010"]  # every 5 steps, not at the end (the model is)
    assert {json.loads((run / "sft/recovery/checkpoints" / s / "metadata.json").read_text())["reason"]
            for s in steps} == {"interval"}


def test_sigterm_saves_the_step_and_the_rerun_matches_an_uninterrupted_run(tmp_path, reference):
    cfg, run = _pretrained(tmp_path, reference)
    stopped = run_stage(run, "sft", cfg, signal_at_step=7, sig=signal.SIGTERM)
    assert stopped.code == 130, stopped.text
    saved = sorted(p.name for p in (run / "sft/recovery/checkpoints").iterdir())
    assert saved[-1] >= "step-000000007" and not (run / SFT_MODEL).exists()
    meta = json.loads((run / "sft/recovery/checkpoints" / saved[-1] / "metadata.json").read_text())
    assert meta["reason"] == "signal" and meta["complete"] is True
    assert any("SFT stopped: checkpoint" in m for m in stopped.logs("warning"))

    resumed = run_stage(run, "sft", cfg, resume=True)
    assert resumed.code == 0, resumed.text
    assert any(m.startswith("SFT resumed from step-") for m in resumed.logs())
    assert (run / SFT_MODEL).read_bytes() == (reference[1] / SFT_MODEL).read_bytes()
    ours, theirs = (json.loads((r / "sft/result.json").read_text()) for r in (run, reference[1]))
    assert ours["series"]["sft.loss"] == theirs["series"]["sft.loss"]
    assert ours["metrics"]["sft.steps"] == theirs["metrics"]["sft.steps"] == 14


def test_changed_sft_settings_are_refused_before_anything_changes(tmp_path, reference):
    cfg, run = _pretrained(tmp_path, reference)
    assert run_stage(run, "sft", cfg, signal_at_step=3, sig=signal.SIGTERM).code == 130
    before = sorted(p.name for p in (run / "sft/recovery/checkpoints").iterdir())
    changed = dict(cfg, finetune_steps=20)
    refused = run_stage(run, "sft", changed, resume=True)
    assert refused.code == 2, refused.text
    assert any("finetune_steps" in m and "new run directory" in m for m in refused.logs("error"))
    assert sorted(p.name for p in (run / "sft/recovery/checkpoints").iterdir()) == before


def test_two_processes_stopped_by_sigterm_to_all_resume_to_the_uninterrupted_two_process_result(tmp_path, reference):
    """Distributed SFT (nproc_per_node 2 under torchrun): SIGTERM to every process at once checkpoints the step
    and exits 130; the resumed run's model is byte-identical to an uninterrupted two-process run."""
    cfg, _ = reference
    cfg2 = dict(cfg, nproc_per_node=2)
    (tmp_path / "whole").mkdir()
    (tmp_path / "stopped").mkdir()
    _, whole = _pretrained(tmp_path / "whole", reference)
    uninterrupted = run_stage(whole, "sft", cfg2)
    assert uninterrupted.code == 0, uninterrupted.text
    _, run = _pretrained(tmp_path / "stopped", reference)
    stopped = run_stage(run, "sft", cfg2, signal_at_step=7, sig=signal.SIGTERM)
    assert stopped.code == 130, stopped.text
    assert not (run / SFT_MODEL).exists()
    # the stop saved the step it reached (a rank that took a copy of the signal for a second request exits
    # without saving, and the resume starts from an earlier interval checkpoint: identical weights all the same)
    saved = [m.split()[3] for m in stopped.logs() if m.startswith("SFT stopped: checkpoint ")]
    assert saved, stopped.text
    resumed = run_stage(run, "sft", cfg2, resume=True)
    assert resumed.code == 0, resumed.text
    assert any(m.startswith(f"SFT resumed from {saved[0]} ") for m in resumed.logs()), resumed.logs()
    assert (run / SFT_MODEL).read_bytes() == (whole / SFT_MODEL).read_bytes()


def test_finetune_learning_rate_is_the_sft_optimizers_peak_and_recorded_in_its_checkpoints(tmp_path, reference):
    """foundation.finetune_learning_rate is the rate SFT's AdamW takes at step 1 (then linear decay) and the one
    its checkpoints record; unset, SFT starts at 1e-3 * sqrt(768 / width) whatever learning_rate says."""
    cfg, ref = reference
    recorded = json.loads((ref / "sft/recovery/checkpoints/step-000000005/metadata.json").read_text())["config"]
    assert recorded["finetune_learning_rate"] == pytest.approx(1e-3 * (768 / 64) ** 0.5)  # depth 1: width 64
    _, run = _pretrained(tmp_path, reference)
    tuned = dict(cfg, finetune_learning_rate=0.004, learning_rate=0.5, finetune_steps=4, checkpoint_interval_steps=2)
    out = run_stage(run, "sft", tuned)
    assert out.code == 0, out.text
    rates = [e["metrics"]["lr"] for e in out.events if e.get("type") == "progress"]
    assert rates == pytest.approx([0.004, 0.003, 0.002, 0.001])
    saved = run / "sft/recovery/checkpoints/step-000000002"
    meta = json.loads((saved / "metadata.json").read_text())
    assert meta["config"]["finetune_learning_rate"] == 0.004 and "learning_rate" not in meta["config"]
    import torch

    groups = torch.load(saved / "optimizer.pt", weights_only=True)["param_groups"]
    assert [g["lr"] for g in groups] == pytest.approx([0.003] * len(groups))  # the rate its second step took

