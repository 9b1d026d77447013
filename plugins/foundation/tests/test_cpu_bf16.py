"""`foundation.cpu_bf16`: pretraining and SFT steps under bf16 autocast on a CPU with native bf16 matrix units.

On such a CPU (AMX or AVX-512 BF16, runtime/torchsetup.py) the steps' matrix products run in bf16, Muon's
iteration too, and a run killed between checkpoints resumes to the same bytes as one never stopped. On a
CPU without them the setting is refused naming it. Whichever this machine is, the test of the other kind
checks the refusal or the bf16 path for real; none is skipped. The probe itself is held to facts it does not
compute: the kernel's CPU flags on this machine, and the answers of the two hardware queries it combines (both
"no", as on a CPU without either unit, must be "no" on every machine, this one included).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tt_stagekit.protocol import StageError

from tt_engine_foundation.runtime import packing, torchsetup
from tt_engine_foundation.runtime.config import FoundationSettings, pretrain_learning_rate
from tt_engine_foundation.runtime.model import config_for_depth
from tt_engine_foundation.runtime.pretrain import run_pretraining
from tt_engine_foundation.runtime.sft import supervised_loss

from test_batch_split import BOS, PAD, SEQ, VOCAB, documents

NATIVE = torchsetup.cpu_has_native_bf16()
STEPS = 6
HEAD = 96  # the model's vocabulary (documents() uses the first VOCAB ids): no other matrix is this wide


class Stop(Exception):
    pass


def settings(cpu_bf16: bool) -> FoundationSettings:
    return FoundationSettings(depth=1, vocab_size=HEAD, sequence_length=SEQ, batch_size=4, pretrain_steps=STEPS,
                              warmup_steps=1, checkpoint_interval_steps=3, checkpoint_interval_seconds=0,
                              log_interval_steps=STEPS, seed=5, device="cpu", cpu_bf16=cpu_bf16)


def pretrain(folder, cfg: FoundationSettings, on_head=None):
    """run_pretraining on documents(); `on_head(output)` sees every output-head forward (a global module hook)."""
    tokens = documents()
    model_cfg = config_for_depth(1, HEAD, SEQ, bos_token_id=BOS, eos_token_id=BOS, pad_token_id=PAD)
    handle = watch_head(on_head) if on_head is not None else None
    try:
        return run_pretraining(
            cfg=cfg, model_cfg=model_cfg, tokens=tokens, device=torch.device("cpu"),
            peak_lr=pretrain_learning_rate(cfg), config={"test": "cpu_bf16"}, fingerprint="cpu-bf16",
            checkpoint_dir=folder / "checkpoints", backup_dir=None, heartbeat_path=folder / "beats.jsonl",
            packing_table=packing.plan(tokens, BOS, SEQ + 1))
    finally:
        if handle is not None:
            handle.remove()


def watch_head(on_head):
    def hook(module, _inputs, output):
        if isinstance(module, torch.nn.Linear) and module.out_features == HEAD:
            on_head(output)
    return torch.nn.modules.module.register_module_forward_hook(hook)


@pytest.mark.skipif(not NATIVE, reason="covered by the refusal test on a CPU without native bf16")
def test_pretraining_steps_compute_in_bf16_and_muon_iterates_in_bf16(tmp_path):
    seen: list = []
    calls: list = []
    import tt_engine_foundation.runtime.muon as muon
    original = muon.orthogonalise

    def recording(update, *args):
        calls.append(args[-1])
        return original(update, *args)
    muon.orthogonalise = recording
    try:
        _, _, bf16 = pretrain(tmp_path / "bf16", settings(True), lambda out: seen.append(out.dtype))
    finally:
        muon.orthogonalise = original
    assert seen and set(seen) == {torch.bfloat16}, seen
    assert calls and all(calls), calls  # every Newton-Schulz iteration asked for bf16
    seen_fp32: list = []
    _, _, fp32 = pretrain(tmp_path / "fp32", settings(False), lambda out: seen_fp32.append(out.dtype))
    assert set(seen_fp32) == {torch.float32}
    first_bf16, first_fp32 = bf16["losses"][0][1], fp32["losses"][0][1]
    assert first_bf16 != first_fp32 and abs(first_bf16 - first_fp32) < 0.02 * first_fp32
    last_bf16, last_fp32 = bf16["losses"][-1][1], fp32["losses"][-1][1]
    assert abs(last_bf16 - last_fp32) < 0.05 * last_fp32, (last_bf16, last_fp32)


@pytest.mark.skipif(not NATIVE, reason="covered by the refusal test on a CPU without native bf16")
def test_a_bf16_run_stopped_between_checkpoints_resumes_to_the_same_bytes(tmp_path):
    whole, _, _ = pretrain(tmp_path / "whole", settings(True))
    forwards = []

    def stop_at_the_fifth_step(_output):
        forwards.append(1)
        if len(forwards) == 5:  # checkpoint 3 is written, step 4 is lost with the process
            raise Stop
    with pytest.raises(Stop):
        pretrain(tmp_path / "stopped", settings(True), stop_at_the_fifth_step)
    resumed, state, _ = pretrain(tmp_path / "stopped", settings(True))
    assert state.step == STEPS
    for name, value in whole.state_dict().items():
        assert torch.equal(resumed.state_dict()[name], value), name


@pytest.mark.skipif(not NATIVE, reason="covered by the refusal test on a CPU without native bf16")
def test_sft_loss_computes_in_bf16_with_the_training_dtype():
    torch.manual_seed(0)
    from tt_engine_foundation.runtime.model import GPT
    model = GPT(config_for_depth(1, HEAD, SEQ))
    model.init_weights(0)
    seen: list = []
    x = torch.randint(2, VOCAB, (2, SEQ))
    dtype = torchsetup.training_autocast_dtype(settings(True), torch.device("cpu"))
    handle = watch_head(lambda out: seen.append(out.dtype))
    try:
        supervised_loss(model, x, x, dtype).backward()
    finally:
        handle.remove()
    assert dtype == torch.bfloat16 and seen == [torch.bfloat16]
    assert torchsetup.training_autocast_dtype(settings(False), torch.device("cpu")) is None


CPUINFO = Path("/proc/cpuinfo")


def kernel_bf16_flags() -> set[str]:
    """The bf16 matrix units Linux reports for this CPU (its CPUID bits, cleared when the OS cannot use them)."""
    flags: set[str] = set()
    for line in CPUINFO.read_text().splitlines():
        if line.startswith("flags"):
            flags |= set(line.partition(":")[2].split())
    return flags & {"amx_bf16", "amx_tile", "avx512_bf16"}


@pytest.mark.skipif(not CPUINFO.is_file(), reason="no /proc/cpuinfo (not Linux): nothing independent to compare with")
def test_the_probe_agrees_with_the_kernels_cpu_flags():
    assert torchsetup.cpu_has_native_bf16() == bool(kernel_bf16_flags()), kernel_bf16_flags()


@pytest.mark.parametrize("amx, avx512_bf16", [(False, False), (True, False), (False, True)])
def test_the_probe_answers_what_the_cpus_units_say(monkeypatch, amx, avx512_bf16):
    """The two hardware queries answering as another CPU would (this machine has one kind only): a CPU with
    neither unit gets "no", whatever this one has."""
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16)
    assert torchsetup.cpu_has_native_bf16() == (amx or avx512_bf16)


def test_a_cpu_without_native_bf16_refuses_the_setting(monkeypatch):
    """On this machine when it lacks AMX and AVX-512 BF16; elsewhere with the probe answering as such a CPU."""
    if NATIVE:
        monkeypatch.setattr(torchsetup, "cpu_has_native_bf16", lambda: False)
    with pytest.raises(StageError, match=r"foundation\.cpu_bf16: this CPU has no native bf16 matrix unit"):
        torchsetup.training_autocast_dtype(settings(True), torch.device("cpu"))
    assert torchsetup.training_autocast_dtype(settings(False), torch.device("cpu")) is None
