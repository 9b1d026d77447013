"""Adapter memory settings on the host side: `tt validate` refuses CUDA-only options on a CPU spec (exit 2,
naming the field, nothing written), evaluation during training needs validation rows, and the doctor's
peak-memory estimate tells a 7B LoRA run that does not fit a 24 GiB card from one that does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import write_spec
from tt_engine_adapter import memory_estimate
from tt_engine_adapter.runtime.config import AdapterSettings

LLAMA_7B = {"hidden_size": 4096, "num_hidden_layers": 32, "vocab_size": 32000, "intermediate_size": 11008,
            "num_attention_heads": 32, "num_key_value_heads": 32, "tie_word_embeddings": False}


def _spec(folder: Path, device: str, **hyperparameters) -> Path:
    model = folder / "model"
    model.mkdir(parents=True, exist_ok=True)
    (model / "config.json").write_text(json.dumps(LLAMA_7B))
    return write_spec(folder, {
        "name": "memory", "engine": "adapter", "base_model": "model", "device": device,
        "system_prompt": "Classify the review.",
        "examples": [{"input": f"review {i}", "output": "positive" if i % 2 else "negative"} for i in range(4)],
        "hyperparameters": {"max_seq_length": 64, **hyperparameters},
    })


@pytest.mark.parametrize("field, value", [("load_in_4bit", True), ("precision", "fp16")])
def test_cuda_only_options_on_cpu_are_refused_naming_the_field(tt, tmp_path, field, value):
    path = _spec(tmp_path / "s", "cpu", **{field: value})
    before = sorted(p.name for p in path.parent.iterdir())
    code, out = tt.json("validate", path)
    assert code == 2, out
    assert any(f"hyperparameters.{field}" in e["msg"] and "CUDA" in e["msg"] for e in out["errors"]), out
    assert sorted(p.name for p in path.parent.iterdir()) == before
    if field == "load_in_4bit":  # the same setting on a CUDA spec is fine
        code, out = tt.json("validate", _spec(tmp_path / "gpu", "cuda", **{field: value}))
        assert code == 0, out


def test_eval_interval_needs_validation_rows_and_patience_needs_the_interval(tt, tmp_path):
    code, out = tt.json("validate", _spec(tmp_path / "a", "cpu", eval_interval_steps=5))
    assert code == 2 and any("hyperparameters.eval_interval_steps" in e["msg"] and "datasets.validation" in e["msg"]
                             for e in out["errors"]), out
    code, out = tt.json("validate", _spec(tmp_path / "b", "cpu", early_stopping_patience=2))
    assert code == 2 and any("hyperparameters.early_stopping_patience" in e["msg"] for e in out["errors"]), out


def _peak(**settings) -> memory_estimate.Estimate:
    hp = {"batch_size": 4, "max_seq_length": 2048, "lora_rank": 16, "compute_bytes": 2, "load_in_4bit": False,
          "gradient_checkpointing": False, **settings}
    return memory_estimate.estimate(LLAMA_7B, **hp)


def test_peak_estimate_of_a_7b_lora_run_and_its_savers():
    gib = memory_estimate.GIB
    plain, ckpt, qlora = _peak(), _peak(gradient_checkpointing=True), _peak(gradient_checkpointing=True, load_in_4bit=True)
    assert 12.5 * gib < plain.weights < 13.5 * gib  # 6.7B parameters in bf16
    assert 3.3 * gib < qlora.weights < 4.5 * gib  # NF4 linears, bf16 embeddings and head
    assert ckpt.activations < plain.activations / 8
    assert plain.total > 24 * gib > ckpt.total > qlora.total
    hp = AdapterSettings(batch_size=4, max_seq_length=2048)
    folder = Path(__file__).parent  # no config.json here: no estimate, no check
    assert memory_estimate.memory_check(hp, folder, "cuda: test", 24 * gib, 2) is None


def test_doctor_memory_check_warns_before_a_run_that_will_not_fit(tmp_path):
    gib = memory_estimate.GIB
    _spec(tmp_path, "cuda")
    folder = tmp_path / "model"
    big = memory_estimate.memory_check(AdapterSettings(batch_size=4, max_seq_length=2048), folder, "cuda: card",
                                       24 * gib, 2)
    assert big.status == "warn" and "of 24.0 GiB on cuda: card" in big.detail
    assert "gradient_checkpointing" in big.hint and "load_in_4bit" in big.hint
    fits = memory_estimate.memory_check(AdapterSettings(batch_size=4, max_seq_length=2048, gradient_checkpointing=True,
                                                        load_in_4bit=True), folder, "cuda: card", 24 * gib, 2)
    assert fits.status == "ok"


def test_doctor_reads_the_card_memory_through_nvidia_smi(tmp_path, monkeypatch):
    """The doctor's cuda memory check sizes the run against the card nvidia-smi reports (a fake one here)."""
    from tt_engine_adapter import plugin
    from tt_engine_adapter.spec import AdapterSpec
    from tt_host.spec.loading import read_json

    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text('#!/bin/sh\ncase "$1" in --query-gpu=memory.total) echo "24576";; '
                   '*) echo "NVIDIA L4, 8.9, 570.86";; esac\n')
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{smi.parent}:{__import__('os').environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    raw, errors = read_json(_spec(tmp_path, "cuda", batch_size=4))
    assert not errors
    spec = AdapterSpec.model_validate({**raw, "base_model": str(tmp_path / "model")})
    check = plugin._memory_check(spec, "cuda")
    assert check is not None and "of 24.0 GiB on cuda: NVIDIA L4" in check.detail, check


HUGE = {**LLAMA_7B, "hidden_size": 16384, "num_hidden_layers": 200, "intermediate_size": 53248,
        "num_attention_heads": 128, "num_key_value_heads": 128}  # about 0.7 trillion parameters: no machine's memory


def _fake_gpu(tmp_path: Path, monkeypatch, mib: int) -> None:
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir(exist_ok=True)
    smi.write_text(f'#!/bin/sh\ncase "$1" in --query-gpu=memory.total) echo "{mib}";; '
                   '*) echo "NVIDIA L4, 8.9, 570.86";; esac\n')
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{smi.parent}:{__import__('os').environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def test_a_plan_that_cannot_fit_this_machine_is_refused_naming_what_to_change(tt, tmp_path):
    """`tt validate` of a CPU plan whose training peak exceeds this machine's whole memory exits 2, naming the
    figure and the settings that shrink it, and creates nothing; the same spec with a small base validates and
    shows its estimate (`plan`, and a "Plan:" line on the terminal)."""
    path = _spec(tmp_path / "s", "cpu", nproc_per_node=2)
    (tmp_path / "s" / "model" / "config.json").write_text(json.dumps(HUGE))
    before = sorted(p.name for p in path.parent.iterdir())
    code, out = tt.json("validate", path)
    assert code == 2, out
    (error,) = [e["msg"] for e in out["errors"] if "cannot fit" in e["msg"]]
    assert "hyperparameters" in error and "2 ranks" in error and "this machine's memory" in error, error
    assert "gradient_checkpointing" in error and "fewer hyperparameters.nproc_per_node" in error, error
    assert sorted(p.name for p in path.parent.iterdir()) == before
    small = {**LLAMA_7B, "hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 128, "vocab_size": 256,
             "num_attention_heads": 4, "num_key_value_heads": 4}
    (tmp_path / "s" / "model" / "config.json").write_text(json.dumps(small))
    code, out = tt.json("validate", path)
    assert code == 0, out
    (line,) = out["plan"]
    assert line.startswith("memory: this plan needs about ") and "(2 ranks × " in line, line
    assert "this machine's memory holds " in line, line
    shown = tt("validate", path)
    assert shown.returncode == 0 and "Plan:\n- memory: this plan needs about " in shown.stdout, shown.stdout
    # a hub base whose files are not on this machine: said, not guessed
    hub = {**json.loads(path.read_text()), "base_model": "org/not-here", "base_model_revision": "a" * 40}
    path.write_text(json.dumps(hub))
    tt.env["HF_HUB_CACHE"] = str(tmp_path / "empty-hub-cache")
    code, out = tt.json("validate", path)
    assert code == 0 and out["plan"] == ["memory: not estimated here: the base model's config.json is not on this "
                                         "machine (tt models prefetch fetches it)"], out


def test_a_gpu_plan_is_judged_against_one_card_and_its_savers_make_it_fit(tmp_path, monkeypatch):
    """A 7B LoRA at 2048 tokens without checkpointing cannot fit a 24 GiB card (refused, naming checkpointing and
    4-bit weights); with both it fits; without a GPU on this machine a "cuda" plan is not judged here."""
    from pydantic import ValidationError

    from tt_engine_adapter.spec import AdapterSpec
    from tt_host.spec.loading import read_json

    raw, errors = read_json(_spec(tmp_path, "cuda", batch_size=4, max_seq_length=2048))
    assert not errors
    raw = {**raw, "base_model": str(tmp_path / "model")}
    AdapterSpec.model_validate(raw)  # no nvidia-smi on PATH: not judged here
    _fake_gpu(tmp_path, monkeypatch, 24576)
    with pytest.raises(ValidationError) as refused:
        AdapterSpec.model_validate(raw)
    assert "cannot fit" in str(refused.value) and "one GPU of this machine holds 24.0 GiB" in str(refused.value)
    assert "gradient_checkpointing" in str(refused.value) and "load_in_4bit" in str(refused.value)
    saved = {**raw, "hyperparameters": {**raw["hyperparameters"], "gradient_checkpointing": True, "load_in_4bit": True}}
    AdapterSpec.model_validate(saved)
