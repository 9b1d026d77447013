"""Items 2-4 at the stage level: byte-identical resume after SIGKILL/SIGTERM, fallback to older or backup
checkpoints, clear refusal when none is intact or the configuration changed, and nothing deleted.

These runs weigh document beginnings up (`foundation.document_start_share` SHARE, on a corpus of long
documents whose rows mostly continue one), and an epoch is shorter than the steps before the first
checkpoint, so every resume here continues the repeated start rows and the per-epoch order from a later
epoch. The default order (share 0) is resumed byte-identically through `tt run` in
tests/e2e/test_foundation_recovery.py and test_foundation_operations.py."""

import json
import os
import shutil
import signal
import stat
from pathlib import Path

import pytest

from conftest import prepare, run_stage, snapshot, tiny_config, wait_signal_taken, wait_until_gone
from tt_engine_foundation.testing import write_documents

MODEL = "pretrain/model/model.safetensors"
SHARE = 0.3
SAMPLES_PER_STEP = 4 * 2  # tiny_config: batch_size x gradient_accumulation_steps


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted pretraining run, shared by the tests below."""
    base = tmp_path_factory.mktemp("ref")
    corpus = write_documents(base / "corpus.jsonl")
    cfg = tiny_config(corpus_path=str(corpus), document_start_share=SHARE)
    run = base / "run"
    prepare(run, cfg)
    out = run_stage(run, "pretrain", cfg)
    assert out.code == 0, out.text
    return cfg, run


def _fresh(tmp_path, reference):
    cfg, ref = reference
    run = tmp_path / "run"
    run.mkdir()
    for part in ("tokenizer", "token_cache"):
        shutil.copytree(ref / part, run / part)
    (run / "pretrain/recovery").mkdir(parents=True)
    for name in ("pretrain-tokens.bin", "pretrain-tokens.packing.bin", "pretrain-tokens.manifest.json"):
        shutil.copy(ref / "pretrain/recovery" / name, run / "pretrain/recovery" / name)
    return cfg, run


def _steps(run):
    return sorted(p.name for p in (run / "pretrain/recovery/checkpoints").iterdir())


def test_reference_run_writes_checkpoints_heartbeats_and_result(reference):
    cfg, run = reference
    assert _steps(run) == ["step-000000012", "step-000000018", "step-000000024"]
    meta = json.loads((run / "pretrain/recovery/checkpoints/step-000000024/metadata.json").read_text())
    assert meta["step"] == 24 and meta["samples_consumed"] == 24 * SAMPLES_PER_STEP
    assert meta["tokens_seen"] == 24 * SAMPLES_PER_STEP * cfg["sequence_length"]
    assert {f["path"] for f in meta["files"]} == {"model.safetensors", "optimizer.pt", "trainer-state.pt"}
    assert len(meta["config_fingerprint"]) == 64 and isinstance(meta["last_loss"], float)
    reasons = {step: json.loads((run / "pretrain/recovery/checkpoints" / step / "metadata.json").read_text())["reason"]
               for step in _steps(run)}
    assert reasons == {"step-000000012": "interval", "step-000000018": "interval", "step-000000024": "stage_end"}
    assert list(meta)[-1] == "complete" and meta["complete"] is True  # the last key written, before the rename
    beats = [json.loads(l) for l in (run / "pretrain/recovery/training-metrics.jsonl").read_text().splitlines()]
    assert [b["step"] for b in beats] == list(range(1, 25))
    assert {"step", "loss", "lr", "tokens_per_second", "elapsed"} <= set(beats[0])
    result = json.loads((run / "pretrain/result.json").read_text())
    assert (f"checkpoints kept in {run / 'pretrain/recovery/checkpoints'}: step-000000024 (stage_end), "
            "step-000000018 (interval), step-000000012 (interval)") in result["notes"]  # report.md's Notes
    assert result["metrics"]["pretrain.steps"] == 24 and result["metrics"]["pretrain.tokens_per_second"] > 0
    assert len(result["series"]["pretrain.loss"]) == 24
    # The order the tests below resume: start rows repeated up to SHARE of each epoch (the corpus alone gives
    # far less), and an epoch shorter than the 6 steps before the first checkpoint.
    rows = json.loads((run / "pretrain/recovery/pretrain-tokens.manifest.json").read_text())["packing"]["rows"]
    per_epoch = result["metrics"]["pretrain.rows_per_epoch"]
    assert rows < per_epoch <= 6 * SAMPLES_PER_STEP, (rows, per_epoch)
    assert SHARE <= result["metrics"]["pretrain.document_start_share"] < SHARE + 0.05
    manifest = json.loads((run / "pretrain/model/artifact-manifest.json").read_text())
    assert {f["path"] for f in manifest["files"]} == {"model.safetensors", "config.json", "tt-model.json", "tokenizer.json"}


def test_sigkill_between_checkpoints_then_resume_is_byte_identical(tmp_path, reference):
    cfg, run = _fresh(tmp_path, reference)
    killed = run_stage(run, "pretrain", cfg, signal_at_step=9, sig=signal.SIGKILL,
                       signal_after=run / "pretrain/recovery/checkpoints/step-000000006")
    assert killed.code == -9
    assert "step-000000006" in _steps(run) and not (run / MODEL).exists()
    cut_short = run / "pretrain/recovery/checkpoints/.tmp-step-000000012-99999"  # a save the kill interrupted
    cut_short.mkdir()
    (cut_short / "model.safetensors").write_bytes(b"half")
    resumed = run_stage(run, "pretrain", cfg, resume=True)
    assert resumed.code == 0, resumed.text
    assert any("resumed pretraining from" in m for m in resumed.logs())
    assert not cut_short.exists() and any("was cut short" in m for m in resumed.logs())
    assert (run / MODEL).read_bytes() == (reference[1] / MODEL).read_bytes()
    for step in ("step-000000018", "step-000000024"):
        a = run / "pretrain/recovery/checkpoints" / step / "model.safetensors"
        assert a.read_bytes() == (reference[1] / "pretrain/recovery/checkpoints" / step / "model.safetensors").read_bytes()


def test_sigterm_checkpoints_the_current_step_and_resumes_from_it(tmp_path, reference):
    """Also: the signal's checkpoint says `reason: signal`, `complete: true`; under a permissive umask (0) the
    heartbeat file is created 0600."""
    cfg, run = _fresh(tmp_path, reference)
    umask = os.umask(0)
    try:
        stopped = run_stage(run, "pretrain", cfg, signal_at_step=8, sig=signal.SIGTERM)
    finally:
        os.umask(umask)
    assert stopped.code == 130, stopped.text
    assert stat.S_IMODE((run / "pretrain/recovery/training-metrics.jsonl").stat().st_mode) == 0o600
    last_step = max(e["step"] for e in stopped.events if e.get("type") == "progress")
    assert f"step-{last_step:09d}" == _steps(run)[-1]
    meta = json.loads((run / "pretrain/recovery/checkpoints" / _steps(run)[-1] / "metadata.json").read_text())
    assert meta["reason"] == "signal" and meta["complete"] is True
    assert any(f"saved at step {last_step}" in m for m in stopped.logs("warning"))
    resumed = run_stage(run, "pretrain", cfg, resume=True)
    assert resumed.code == 0, resumed.text
    assert any(f"at step {last_step}" in m for m in resumed.logs())
    first = min(e["step"] for e in resumed.events if e.get("type") == "progress")
    assert first == last_step + 1
    assert (run / MODEL).read_bytes() == (reference[1] / MODEL).read_bytes()


def test_corrupt_newest_falls_back_to_previous_and_says_so(tmp_path, reference):
    cfg, run = _fresh(tmp_path, reference)
    shutil.copytree(reference[1] / "pretrain/recovery/checkpoints", run / "pretrain/recovery/checkpoints")
    newest = run / "pretrain/recovery/checkpoints/step-000000024/model.safetensors"
    newest.write_bytes(newest.read_bytes()[:-100])  # truncated
    middle = run / "pretrain/recovery/checkpoints/step-000000018/optimizer.pt"
    data = bytearray(middle.read_bytes())
    data[len(data) // 2] ^= 0x01  # one flipped bit
    middle.write_bytes(bytes(data))
    out = run_stage(run, "pretrain", cfg, resume=True)
    assert out.code == 0, out.text
    warnings = "\n".join(out.logs("warning"))
    assert "step-000000024 is not usable: model.safetensors is" in warnings and "truncated" in warnings
    assert "step-000000018 is not usable: optimizer.pt does not match its sha256" in warnings
    assert "resuming from" in warnings and "step-000000012" in warnings
    assert (run / MODEL).read_bytes() == (reference[1] / MODEL).read_bytes()
    # the damaged folder was moved aside, not deleted
    assert any(p.name.startswith("step-000000024.replaced-") for p in (run / "pretrain/recovery/checkpoints").iterdir())


def test_a_step_whose_metadata_lacks_complete_is_skipped_and_the_run_resumes_from_the_older_one(tmp_path, reference):
    cfg, run = _fresh(tmp_path, reference)
    shutil.copytree(reference[1] / "pretrain/recovery/checkpoints", run / "pretrain/recovery/checkpoints")
    newest = run / "pretrain/recovery/checkpoints/step-000000024/metadata.json"
    meta = json.loads(newest.read_text())
    del meta["complete"]  # every file still matches its sha256: only the mark of a finished save is missing
    newest.write_text(json.dumps(meta))
    out = run_stage(run, "pretrain", cfg, resume=True)
    assert out.code == 0, out.text
    assert any("step-000000024 is not usable: metadata.json does not say `complete: true`" in m
               for m in out.logs("warning")), out.logs("warning")
    assert any("at step 18" in m for m in out.logs())
    assert min(e["step"] for e in out.events if e.get("type") == "progress") == 19
    assert (run / MODEL).read_bytes() == (reference[1] / MODEL).read_bytes()


def test_checkpoints_of_an_older_tt_without_complete_resume_when_their_files_verify(tmp_path, reference):
    """Metadata format 1 (a tt from before `complete` and `reason`): a run upgraded mid-training keeps its steps."""
    cfg, run = _fresh(tmp_path, reference)
    shutil.copytree(reference[1] / "pretrain/recovery/checkpoints", run / "pretrain/recovery/checkpoints")
    for step in _steps(run):
        path = run / "pretrain/recovery/checkpoints" / step / "metadata.json"
        meta = {k: v for k, v in json.loads(path.read_text()).items() if k not in ("complete", "reason")}
        path.write_text(json.dumps(dict(meta, format=1)))
    out = run_stage(run, "pretrain", cfg, resume=True)
    assert out.code == 0, out.text
    assert any("step-000000024 is intact: written by an older tt" in m for m in out.logs("warning"))
    assert any("resumed pretraining from" in m and "step-000000024" in m for m in out.logs())
    assert (run / MODEL).read_bytes() == (reference[1] / MODEL).read_bytes()
    result = json.loads((run / "pretrain/result.json").read_text())
    assert any("step-000000024 (reason not recorded (an older tt))" in n for n in result["notes"])


def test_a_backup_inside_the_checkpoints_folder_is_refused_before_any_step(tmp_path, reference):
    cfg, run = _fresh(tmp_path, reference)
    checkpoints = run / "pretrain/recovery/checkpoints"
    backup = checkpoints / "backup"
    before = snapshot(run)
    out = run_stage(run, "pretrain", dict(cfg, checkpoint_backup_dir=str(backup)))
    assert out.code == 2, out.text
    message = out.logs("error")[-1]
    assert "foundation.checkpoint_backup_dir" in message and str(backup) in message and str(checkpoints) in message
    assert not [e for e in out.events if e.get("type") == "progress"]
    after = snapshot(run)
    after.pop("pretrain/request.json", None)
    assert after == before and not checkpoints.exists()


def test_backup_copy_is_used_when_local_checkpoints_are_damaged(tmp_path, reference):
    cfg, run = _fresh(tmp_path, reference)
    backup = tmp_path / "backup"
    cfg = dict(cfg, checkpoint_backup_dir=str(backup))
    stopped = run_stage(run, "pretrain", cfg, signal_at_step=14, sig=signal.SIGTERM,
                        signal_after=run / "pretrain/recovery/checkpoints/step-000000012")
    assert stopped.code == 130
    local = _steps(run)
    assert sorted(p.name for p in (backup / "run").iterdir()) == local
    for step in local:  # damage every local copy
        (run / "pretrain/recovery/checkpoints" / step / "metadata.json").write_text("{broken")
    out = run_stage(run, "pretrain", cfg, resume=True)
    assert out.code == 0, out.text
    assert any(str(backup / "run") in m for m in out.logs())
    assert (run / MODEL).read_bytes() == (reference[1] / MODEL).read_bytes()


def test_no_intact_checkpoint_stops_and_deletes_nothing(tmp_path, reference):
    cfg, run = _fresh(tmp_path, reference)
    shutil.copytree(reference[1] / "pretrain/recovery/checkpoints", run / "pretrain/recovery/checkpoints")
    for step in _steps(run):
        (run / "pretrain/recovery/checkpoints" / step / "model.safetensors").write_bytes(b"garbage")
    before = snapshot(run / "pretrain/recovery")
    out = run_stage(run, "pretrain", cfg, resume=True)
    assert out.code == 1
    assert "no intact pretraining checkpoint" in out.logs("error")[-1] and "nothing was deleted" in out.logs("error")[-1]
    assert snapshot(run / "pretrain/recovery") == before


@pytest.mark.parametrize("change", [{"depth": 2}, {"learning_rate": 0.01}, {"pretrain_steps": 30}, {"seed": 12},
                                    {"document_start_share": 0.0}])
def test_changed_configuration_is_refused_before_any_change(tmp_path, reference, change):
    cfg, run = _fresh(tmp_path, reference)
    shutil.copytree(reference[1] / "pretrain/recovery/checkpoints", run / "pretrain/recovery/checkpoints")
    before = snapshot(run)
    out = run_stage(run, "pretrain", dict(cfg, **change), resume=True)
    assert out.code == 2, out.text
    message = out.logs("error")[-1]
    assert "use a new run directory" in message and next(iter(change)) in message
    after = snapshot(run)
    after.pop("pretrain/request.json", None)
    before.pop("pretrain/request.json", None)
    assert after == before


def test_changed_corpus_or_vocab_is_refused_by_earlier_stages(tmp_path, reference):
    cfg, run = _fresh(tmp_path, reference)
    shutil.copytree(reference[1] / "pretrain/recovery/checkpoints", run / "pretrain/recovery/checkpoints")
    before = snapshot(run / "pretrain/recovery")
    out = run_stage(run, "tokenizer", dict(cfg, vocab_size=330))
    assert out.code == 2 and "use a new run directory" in out.logs("error")[-1]
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"text": "different text " * 50}) + "\n")
    out = run_stage(run, "token_cache", dict(cfg, corpus_path=str(other)))
    assert out.code == 2 and "use a new run directory" in out.logs("error")[-1]
    assert snapshot(run / "pretrain/recovery") == before


def test_a_stop_while_the_background_writer_is_mid_write_resumes_identically(tmp_path, reference):
    """The interval checkpoint of step 6 is held mid-write (its files written, not yet hashed, fsynced or renamed:
    the test gate) while training reaches step 8 and SIGTERM arrives. Released once the stage has taken the
    signal, the writer finishes step 6, the stop saves its step, exit 130, no half-written folder is left; the
    resumed run's model is byte-identical to the uninterrupted one's."""

    cfg, run = _fresh(tmp_path, reference)
    gate = tmp_path / "checkpoint-gate"
    gate.write_text("closed\n")
    held = tmp_path / "checkpoint-gate.held"

    def release(pid: int) -> None:
        wait_signal_taken(pid, signal.SIGTERM)  # the stage has taken the stop (no longer pending) ...
        assert held.exists(), "the writer left the gate before it was opened"  # ... while the writer is held
        gate.unlink()
        wait_until_gone(held)

    stopped = run_stage(run, "pretrain", cfg, signal_at_step=8, sig=signal.SIGTERM, signal_after=held,
                        env_extra={"TT_TEST_CHECKPOINT_GATE": str(gate)}, on_signalled=release)
    assert stopped.code == 130, stopped.text
    last = max(e["step"] for e in stopped.events if e.get("type") == "progress")  # the step the stop saved
    assert _steps(run) == ["step-000000006", f"step-{last:09d}"], _steps(run)  # both complete, nothing hidden
    resumed = run_stage(run, "pretrain", cfg, resume=True)
    assert resumed.code == 0, resumed.text
    assert any(f"at step {last}" in m for m in resumed.logs())
    assert (run / MODEL).read_bytes() == (reference[1] / MODEL).read_bytes()
