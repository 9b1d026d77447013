"""Peak training memory of an adapter run, estimated from the base model's config.json (host side, no torch).

`tt doctor` compares the estimate with the GPU's memory (nvidia-smi) or the
machine's available memory (CPU) and warns before a run that will not fit,
naming the settings that shrink it. The estimate is deliberately simple and
errs high: the base weights in their training dtype (0.5 byte per linear
weight plus quantization constants with `load_in_4bit`, fp32 master weights
for fp16), the LoRA weights with their gradients and AdamW moments, the
activations autograd keeps for one micro-batch (every layer's, or with
`gradient_checkpointing` each layer's input plus one layer's worth), the
fp32 logits and their gradient, and a fixed allowance for the CUDA context.

Per rank with several training processes (`world_size`): each computes 1/world_size of the micro-batch's rows;
with sharding "fsdp" each holds 1/world_size of the weights and of the LoRA state plus two decoder layers
gathered whole (the one computing and the next, prefetched), and with `cpu_offload` only those two layers
on the device (the shards and the optimizer live in host memory).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

GIB = 1024 ** 3
CONTEXT_BYTES = int(0.75 * GIB)  # CUDA context, allocator slack, kernels' workspaces


@dataclass(frozen=True)
class Estimate:
    weights: int
    lora: int
    activations: int
    logits: int

    @property
    def total(self) -> int:
        return self.weights + self.lora + self.activations + self.logits + CONTEXT_BYTES

    def describe(self) -> str:
        parts = ", ".join(f"{name} {getattr(self, name) / GIB:.1f}" for name in ("weights", "lora", "activations", "logits"))
        return f"{self.total / GIB:.1f} GiB ({parts}, context {CONTEXT_BYTES / GIB:.2f})"


def read_config(folder: Path) -> Optional[dict[str, Any]]:
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    config = config.get("text_config", config) if isinstance(config, dict) else None
    needed = ("hidden_size", "num_hidden_layers", "vocab_size", "intermediate_size", "num_attention_heads")
    if not isinstance(config, dict) or not all(isinstance(config.get(k), int) and config[k] > 0 for k in needed):
        return None
    return config


def estimate(config: dict[str, Any], *, batch_size: int, max_seq_length: int, lora_rank: int, compute_bytes: int,
             load_in_4bit: bool, gradient_checkpointing: bool, fp16_master: bool = False, world_size: int = 1,
             sharding: str = "none", cpu_offload: bool = False) -> Estimate:
    """Bytes at one rank's training peak for a micro-batch of `batch_size` × `max_seq_length` tokens."""
    h, layers, vocab = config["hidden_size"], config["num_hidden_layers"], config["vocab_size"]
    inter, heads = config["intermediate_size"], config["num_attention_heads"]
    kv = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or h // heads
    attention = 2 * h * heads * head_dim + 2 * h * kv * head_dim
    linear = layers * (attention + 3 * h * inter)
    embeddings = vocab * h * (1 if config.get("tie_word_embeddings") else 2)
    weight_bytes = 4 if fp16_master else compute_bytes
    if load_in_4bit:  # NF4: 0.5 byte a weight, double-quantized constants ~0.13 bit; embeddings and head unquantized
        weights = int(linear * (0.5 + 0.13 / 8)) + embeddings * compute_bytes
    else:
        weights = (linear + embeddings) * weight_bytes
    # "all-linear": r × (in + out) for q, k, v, o (h + h each) and gate, up, down (h + inter each)
    lora_params = layers * lora_rank * (8 * h + 3 * (h + inter))
    lora = lora_params * 16  # fp32 weight, gradient, AdamW's two moments
    if sharding == "fsdp" and world_size > 1:
        gathered = 2 * (linear // layers) * weight_bytes  # the layer computing and the next, gathered whole
        weights = gathered if cpu_offload else weights // world_size + gathered
        lora = 0 if cpu_offload else lora // world_size
    tokens = -(-batch_size // world_size) * max_seq_length
    per_layer_token = (16 * h + 6 * inter) * compute_bytes  # linear inputs, norms, attention output, SwiGLU
    if gradient_checkpointing:
        activations = tokens * (layers * h * compute_bytes + per_layer_token)
    else:
        activations = tokens * layers * per_layer_token
    logits = tokens * vocab * 4 * 2  # fp32 logits and their gradient (the loss upcasts)
    return Estimate(weights=weights, lora=lora, activations=activations, logits=logits)


def available_cpu_bytes() -> Optional[int]:
    """MemAvailable (Linux), else the physical memory; None when neither is known."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        import os

        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def memory_check(hp: Any, folder: Optional[Path], where: str, available: Optional[int], compute_bytes: int,
                 fp16: bool = False):
    """A doctor Check: the estimated peak against `available` bytes on `where` ("cuda: <GPU>" or "cpu")."""
    from tt_host.api import Check

    config = read_config(folder) if folder is not None else None
    if config is None or not available:
        return None
    peak = estimate(config, batch_size=hp.batch_size, max_seq_length=hp.max_seq_length, lora_rank=hp.lora_rank,
                    compute_bytes=compute_bytes, load_in_4bit=hp.load_in_4bit,
                    gradient_checkpointing=hp.gradient_checkpointing, fp16_master=fp16, world_size=hp.world_size,
                    sharding=hp.sharding, cpu_offload=hp.fsdp_cpu_offload)
    per_rank = f" per rank ({hp.world_size} processes, sharding {hp.sharding!r})" if hp.world_size > 1 else ""
    detail = f"estimated training peak{per_rank} {peak.describe()} of {available / GIB:.1f} GiB on {where}"
    data = {"estimated_peak_bytes": peak.total, "available_bytes": available}
    if peak.total <= 0.9 * available:
        return Check("training memory", "ok", detail, data=data)
    savers = [name for name, on in (("hyperparameters.gradient_checkpointing: true", hp.gradient_checkpointing),
                                    ("hyperparameters.load_in_4bit: true (CUDA)", hp.load_in_4bit or hp.sharding == "fsdp"),
                                    ('hyperparameters.sharding: "fsdp" with nproc_per_node > 1', hp.sharding == "fsdp"),
                                    ("hyperparameters.fsdp_cpu_offload: true (CUDA)",
                                     hp.sharding != "fsdp" or hp.fsdp_cpu_offload)) if not on]
    return Check("training memory", "warn", detail + ": this run is unlikely to fit",
                 "set " + ", ".join(savers + ["a smaller hyperparameters.batch_size (raise "
                                              "gradient_accumulation_steps to keep the batch) or max_seq_length"]),
                 data=data)
