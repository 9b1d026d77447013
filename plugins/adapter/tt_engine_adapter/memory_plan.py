"""Whether a training plan can fit at all on this machine's devices (host side, never torch): `tt validate` and
`tt run` refuse one that cannot (exit 2), naming the settings that shrink it.

The peak is memory_estimate's, per rank (sharding, precision, offload, gradient checkpointing and 4-bit weights
counted), for the base's config.json when its files are on this machine (a local folder, or the cached snapshot of
its revision). It is compared with the whole memory of the devices the spec names, never what happens to be free
(that is `tt doctor`'s warning, at 90% of what is available):

- device "cpu": every rank of a node shares this machine's physical memory, so the node needs the per-rank peak
  times `nproc_per_node`;
- device "cuda" (or "auto") with NVIDIA GPUs visible here: each rank has one GPU, the first GPU's total memory;
- device "cuda" without a GPU here, "auto" without one, or "mps": not judged here (a login node preparing a
  cluster's run; `tt doctor` on the machine that trains says it).

The estimate errs high (memory_estimate's docstring), so a refusal names the figure and what to change; it never
guesses a smaller base.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from tt_engine_adapter import memory_estimate

HEX40 = re.compile(r"^[0-9a-f]{40}\Z")  # a commit id (spec.HEX40 is this one)


def hf_cache_dir() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface")
    return Path(home).expanduser() / "hub"


def model_folder(base_model: str, revision: Any) -> Optional[Path]:
    """The base model's files on this machine: the local folder, or the cached snapshot of its revision."""
    if Path(base_model).is_absolute():
        return Path(base_model)
    repo = hf_cache_dir() / f"models--{base_model.replace('/', '--')}"
    ref = repo / "refs" / str(revision)
    commit = str(revision) if HEX40.match(str(revision)) else (
        ref.read_text(encoding="utf-8").strip() if ref.is_file() else "")
    return repo / "snapshots" / commit if commit else None


def _gpu() -> Optional[tuple[int, bool]]:
    """(total bytes of the first visible NVIDIA GPU, whether it computes in bf16), or None without one."""
    from tt_stagekit.gpus import first_gpu_memory_bytes, nvidia_gpus

    gpus = nvidia_gpus()
    total = first_gpu_memory_bytes() if gpus else None
    if not gpus or not total:
        return None
    try:
        bf16 = float(gpus[0].compute_cap) >= 8.0
    except ValueError:
        bf16 = False
    return total, bf16


def _physical_bytes() -> Optional[int]:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


@dataclass(frozen=True)
class Plan:
    """A training plan judged against the devices the spec names: the per-rank peak, the ranks sharing `total`
    bytes of `where`."""

    peak: Any  # memory_estimate.Estimate
    ranks: int
    total: int
    where: str

    @property
    def need(self) -> int:
        return self.peak.total * self.ranks

    @property
    def fits(self) -> bool:
        return self.need <= self.total


def judge(hp: Any, device: str, folder: Optional[Path]) -> tuple[Optional[Plan], str]:
    """The plan judged on this machine, or (None, why it cannot be judged here)."""
    config = memory_estimate.read_config(folder) if folder is not None else None
    if config is None:
        return None, "the base model's config.json is not on this machine (tt models prefetch fetches it)"
    if device == "mps":
        return None, "device mps is not judged (tt doctor on the machine that trains)"
    if device == "cpu":
        total, compute_bytes, fp16, ranks, where = _physical_bytes(), 4, False, hp.nproc_per_node, "this machine's memory"
    else:
        gpu = _gpu()
        if gpu is None:
            return None, f"device {device} names GPUs this machine lacks (tt doctor on the machine that trains)"
        total, bf16 = gpu
        fp16 = hp.precision == "fp16" or (hp.precision == "auto" and not bf16)
        compute_bytes, ranks, where = (4 if hp.precision == "fp32" else 2), 1, "one GPU of this machine"
    if not total:
        return None, "this machine's memory could not be read"
    peak = memory_estimate.estimate(
        config, batch_size=hp.batch_size, max_seq_length=hp.max_seq_length, lora_rank=hp.lora_rank,
        compute_bytes=compute_bytes, load_in_4bit=hp.load_in_4bit, gradient_checkpointing=hp.gradient_checkpointing,
        fp16_master=fp16, world_size=hp.world_size, sharding=hp.sharding, cpu_offload=hp.fsdp_cpu_offload)
    return Plan(peak, ranks, total, where), ""


def _needs(plan: Plan) -> str:
    gib = memory_estimate.GIB
    per = f" ({plan.ranks} ranks × {plan.peak.total / gib:.1f} GiB)" if plan.ranks > 1 else ""
    return f"about {plan.need / gib:.1f} GiB{per} at its training peak ({plan.peak.describe()})"


def plan_line(hp: Any, device: str, folder: Optional[Path]) -> str:
    """What `tt validate` says of a plan that passed `plan_error`: its estimate and where it fits, or why it is
    not judged here."""
    plan, why = judge(hp, device, folder)
    if plan is None:
        return f"memory: not estimated here: {why}"
    return (f"memory: this plan needs {_needs(plan)}; {plan.where} holds "
            f"{plan.total / memory_estimate.GIB:.1f} GiB (the estimate errs high; tt doctor compares it with what is free)")


def plan_error(hp: Any, device: str, folder: Optional[Path]) -> Optional[str]:
    """The refusal for a plan whose estimated peak exceeds the whole memory of the devices the spec names on this
    machine, or None (it fits, or it cannot be judged here)."""
    plan, _ = judge(hp, device, folder)
    if plan is None or plan.fits:
        return None
    savers = [text for text, applies in (
        ('hyperparameters.sharding "fsdp" with more processes (nproc_per_node, nnodes)', device != "cpu"),
        ("hyperparameters.load_in_4bit: true", device != "cpu" and not hp.load_in_4bit and hp.sharding != "fsdp"),
        ("hyperparameters.fsdp_cpu_offload: true", device != "cpu" and hp.sharding == "fsdp" and not hp.fsdp_cpu_offload),
        ("hyperparameters.gradient_checkpointing: true", not hp.gradient_checkpointing),
        ("fewer hyperparameters.nproc_per_node", device == "cpu" and plan.ranks > 1)) if applies]
    savers.append("a smaller hyperparameters.batch_size or max_seq_length, or a smaller base_model")
    return (f"hyperparameters: this plan needs {_needs(plan)} and {plan.where} holds "
            f"{plan.total / memory_estimate.GIB:.1f} GiB: it cannot fit. Set "
            + "; or ".join(savers) + " (tt doctor shows the estimate)")
