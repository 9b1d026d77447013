"""SFT replay (`foundation.finetune_corpus_rows`): every step also trains on rows of the pretraining token cache.

The rows are the token cache's own rows in a seeded order of their own, a pure function of the step; the
corpus loss is split over ranks so that their sum is the single-process mean; the stage reports the corpus
loss (every step's, as the series `sft.corpus_loss`, whole after a resume), records the token cache in its checkpoints, and a SIGTERM-and-resume ends byte-identical."""

import json
import shutil
import signal

import numpy as np
import pytest
import torch

from conftest import prepare, run_stage, tiny_config, write_corpus

SFT_MODEL = "sft/model/model.safetensors"


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    """A tiny pretraining, then an uninterrupted SFT with replay."""
    base = tmp_path_factory.mktemp("replay")
    cfg = tiny_config(corpus_path=str(write_corpus(base / "corpus.jsonl")), pretrain_steps=6, finetune_steps=10,
                      checkpoint_interval_steps=4, finetune_corpus_rows=3)
    run = base / "run"
    prepare(run, cfg)
    assert run_stage(run, "pretrain", cfg).code == 0
    out = run_stage(run, "sft", cfg)
    assert out.code == 0, out.text
    return cfg, run, out


def _copy_pretrained(tmp_path, run):
    target = tmp_path / "run"
    target.mkdir()
    for part in ("tokenizer", "token_cache", "pretrain"):
        shutil.copytree(run / part, target / part)
    (target / "sft").mkdir()
    return target


def _open(run, cfg):
    from tt_engine_foundation.runtime import tokenizer
    from tt_engine_foundation.runtime.config import FoundationSettings, Layout
    from tt_engine_foundation.runtime.replay import open_replay

    settings = FoundationSettings(**{k: v for k, v in cfg.items() if k in FoundationSettings.__dataclass_fields__})
    tok = tokenizer.load_run_tokenizer(Layout(run).tokenizer_json)
    bos, pad = tokenizer.special_id(tok, tokenizer.BOS), tokenizer.special_id(tok, tokenizer.PAD)
    return settings, open_replay(settings, Layout(run), bos, pad), pad


def test_replayed_rows_are_token_cache_rows_in_an_order_fixed_by_seed_and_step(pretrained):
    cfg, run, _ = pretrained
    settings, replay, _ = _open(run, cfg)
    again = _open(run, cfg)[1]
    assert replay.batch(5).shape == (3, cfg["sequence_length"] + 1)
    assert torch.equal(replay.batch(5), again.batch(5)) and not torch.equal(replay.batch(5), replay.batch(6))
    every = {tuple(replay.sampler.row(i).tolist()) for i in range(replay.sampler.count)}
    drawn = [tuple(r.tolist()) for s in range(4) for r in replay.batch(s)]
    assert set(drawn) <= every and len(set(drawn)) == len(drawn)  # distinct rows within an epoch
    from tt_engine_foundation.runtime.packing import PackedRows

    pretraining = PackedRows(replay.sampler.tokens, replay.sampler.table, settings.sequence_length + 1,
                             replay.sampler.bos_id, replay.sampler.pad_id, settings.seed)
    assert not np.array_equal(pretraining.batch(0, 3), replay.batch(0).numpy())  # not pretraining's order again
    assert _open(run, dict(cfg, finetune_corpus_rows=0))[1] is None


def test_the_ranks_shares_of_the_corpus_loss_sum_to_the_single_process_mean(pretrained):
    cfg, run, _ = pretrained
    from tt_engine_foundation.runtime.model_io import load_model_dir

    _, replay, pad = _open(run, cfg)
    model = load_model_dir(run / "pretrain" / "model", torch.device("cpu"))
    with torch.no_grad():
        whole = float(replay.loss(model, 2, pad, torch.device("cpu"), None))
        for world in (2, 4):  # 4 ranks for 3 rows: one rank takes part with a zero-weight row
            shares = [float(replay.loss(model, 2, pad, torch.device("cpu"), None, rank, world)) for rank in range(world)]
            assert sum(shares) / world == pytest.approx(whole, rel=1e-5)
    assert 0 < whole < 20


def test_the_stage_reports_the_corpus_loss_and_records_the_token_cache(pretrained):
    cfg, run, out = pretrained
    steps = [e for e in out.events if e.get("type") == "progress"]
    assert len(steps) == 10 and all(np.isfinite(e["metrics"]["corpus_loss"]) for e in steps)
    result = json.loads((run / "sft/result.json").read_text())
    metrics = result["metrics"]
    assert metrics["sft.corpus_rows_per_step"] == 3 and metrics["sft.final_corpus_loss"] == steps[-1]["metrics"]["corpus_loss"]
    # the replay loss as a series beside the chat loss, one point per step (what report.html charts)
    series = result["series"]
    assert [s for s, _ in series["sft.corpus_loss"]] == [s for s, _ in series["sft.loss"]] == list(range(1, 11))
    assert [v for _, v in series["sft.corpus_loss"]] == [e["metrics"]["corpus_loss"] for e in steps]
    recorded = json.loads((run / "sft/recovery/checkpoints/step-000000004/metadata.json").read_text())["config"]
    cache = json.loads((run / "pretrain/recovery/pretrain-tokens.manifest.json").read_text())["file"]["sha256"]
    assert recorded["finetune_corpus_rows"] == 3 and recorded["replay_token_cache_sha256"] == cache


def test_replay_changes_the_weights_and_sigterm_then_resume_is_byte_identical(tmp_path, pretrained):
    cfg, ref, _ = pretrained
    (tmp_path / "plain").mkdir()
    plain = _copy_pretrained(tmp_path / "plain", ref)
    assert run_stage(plain, "sft", dict(cfg, finetune_corpus_rows=0)).code == 0
    assert (plain / SFT_MODEL).read_bytes() != (ref / SFT_MODEL).read_bytes()

    (tmp_path / "stopped").mkdir()
    run = _copy_pretrained(tmp_path / "stopped", ref)
    stopped = run_stage(run, "sft", cfg, signal_at_step=6, sig=signal.SIGTERM)
    assert stopped.code == 130, stopped.text
    changed = run_stage(run, "sft", dict(cfg, finetune_corpus_rows=2), resume=True)
    assert changed.code == 2 and any("finetune_corpus_rows" in m for m in changed.logs("error")), changed.text
    resumed = run_stage(run, "sft", cfg, resume=True)
    assert resumed.code == 0, resumed.text
    assert any(m.startswith("SFT resumed from step-") for m in resumed.logs())
    assert (run / SFT_MODEL).read_bytes() == (ref / SFT_MODEL).read_bytes()
    # the resumed stage reports every step's replay loss, those before the stop from its checkpoint
    series = [json.loads((folder / "sft/result.json").read_text())["series"]["sft.corpus_loss"] for folder in (run, ref)]
    assert series[0] == series[1] and len(series[0]) == cfg["finetune_steps"]
