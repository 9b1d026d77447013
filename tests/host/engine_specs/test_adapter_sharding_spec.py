"""`hyperparameters.sharding` on the host side: "fsdp" validates for SFT; a tuning stage after it (preference,
reinforce), 4-bit weights, fp16 and a CPU offload without sharding are refused by `tt validate` (exit 2, naming
the setting and the stage, nothing written); the train stage's fingerprint leaves the sharding out (a checkpoint
resumes across a switch, runtime/distributed_checkpoint.py), and the doctor's memory estimate is per rank."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from test_adapter_memory_settings import LLAMA_7B, _spec as memory_spec
from tt_engine_adapter import memory_estimate, plugin
from tt_engine_adapter.spec import AdapterSpec


def _spec(folder: Path, device: str = "cuda", extra: dict | None = None, **hyperparameters) -> Path:
    """test_adapter_memory_settings' 7B spec with 2 processes (and `extra` top-level blocks), on "cuda": no GPU here
    judges its fit, and on a CPU two 7B ranks cannot fit a small machine (memory_plan)."""
    path = memory_spec(folder, device, nproc_per_node=2, batch_size=4, **hyperparameters)
    path.write_text(json.dumps({**json.loads(path.read_text()), **(extra or {})}))
    return path


def test_fsdp_validates_for_sft(tt, tmp_path):
    code, out = tt.json("validate", _spec(tmp_path / "ok", sharding="fsdp"))
    assert code == 0, out


@pytest.mark.parametrize("extra, stage", [({"preference": {"pairs": "derived"}}, "preference stage (spec.preference)"),
                                          ({"reinforcement": {"steps": 2}}, "reinforce stage (spec.reinforcement)")])
def test_a_tuning_stage_after_sharded_sft_is_refused_naming_the_stage(tt, tmp_path, extra, stage):
    # room for the sampled answers' budget in max_seq_length (refused on its own otherwise: test_grpo_spec.py)
    path = _spec(tmp_path / "s", extra=extra, sharding="fsdp", max_seq_length=512)
    before = sorted(p.name for p in path.parent.iterdir())
    code, out = tt.json("validate", path)
    assert code == 2, out
    assert any("hyperparameters.sharding" in e["msg"] and stage in e["msg"] for e in out["errors"]), out
    assert sorted(p.name for p in path.parent.iterdir()) == before


@pytest.mark.parametrize("device, settings, named", [
    ("cuda", {"sharding": "fsdp", "load_in_4bit": True}, "hyperparameters.load_in_4bit"),
    ("cuda", {"sharding": "fsdp", "precision": "fp16"}, "hyperparameters.precision"),
    ("cuda", {"fsdp_cpu_offload": True}, "hyperparameters.fsdp_cpu_offload"),
    ("cpu", {"sharding": "fsdp", "fsdp_cpu_offload": True}, "hyperparameters.fsdp_cpu_offload"),
])
def test_what_sharding_cannot_do_yet_is_refused_naming_the_setting(tt, tmp_path, device, settings, named):
    code, out = tt.json("validate", _spec(tmp_path / "s", device, **settings))
    assert code == 2 and any(named in e["msg"] for e in out["errors"]), out


def test_the_train_fingerprint_leaves_the_sharding_out(tmp_path):
    from tt_host.spec.loading import read_json

    raw, errors = read_json(_spec(tmp_path / "a"))
    assert not errors
    plain = AdapterSpec.model_validate({**raw, "base_model": str(tmp_path / "a" / "model")})
    sharded = plain.model_copy(update={"hyperparameters": plain.hyperparameters.model_copy(
        update={"sharding": "fsdp", "fsdp_cpu_offload": True, "nproc_per_node": 4})})
    assert plugin._train_inputs(plain) == plugin._train_inputs(sharded)
    other = plain.model_copy(update={"hyperparameters": plain.hyperparameters.model_copy(update={"lora_rank": 4})})
    assert plugin._train_inputs(plain) != plugin._train_inputs(other)  # the comparison can fail


def _peak(**settings) -> memory_estimate.Estimate:
    hp = {"batch_size": 8, "max_seq_length": 2048, "lora_rank": 16, "compute_bytes": 2, "load_in_4bit": False,
          "gradient_checkpointing": True, **settings}
    return memory_estimate.estimate(LLAMA_7B, **hp)


def test_the_memory_estimate_is_per_rank_with_sharding():
    whole, dp = _peak(), _peak(world_size=4)
    sharded = _peak(world_size=4, sharding="fsdp")
    offloaded = _peak(world_size=4, sharding="fsdp", cpu_offload=True)
    assert dp.weights == whole.weights and dp.activations < whole.activations  # each rank: a quarter of the rows
    assert sharded.weights < 0.35 * whole.weights and sharded.lora <= whole.lora // 4
    assert sharded.activations == dp.activations
    assert offloaded.weights < sharded.weights and offloaded.lora == 0
