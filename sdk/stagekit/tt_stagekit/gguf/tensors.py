"""llama.cpp's view of a Hugging Face decoder: its architecture, hyperparameters, tensor names and layout.

Llama and Mistral are llama.cpp's "llama" architecture, which applies rotary embeddings to interleaved pairs
while Hugging Face rotates halves: their q_proj and k_proj rows are permuted (per head, the two halves
interleaved) so that llama.cpp computes the same attention. Qwen2 (with q/k/v biases) and Qwen3 (with q/k
RMSNorm) are architectures of their own that rotate halves, so nothing is permuted. Norms and biases stay
F32; matrices take the requested type (a row not a whole number of quantization blocks stays F16).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

QUANTS = ("f32", "f16", "bf16", "q8_0", "q4_0")

# Hugging Face model_type -> llama.cpp architecture name
ARCHITECTURES = {"llama": "llama", "mistral": "llama", "qwen2": "qwen2", "qwen3": "qwen3"}
PERMUTES_QK = {"llama"}


class LayoutError(ValueError):
    """The model is not one llama.cpp's layout can hold as tt writes it."""


@dataclass(frozen=True)
class Hyper:
    arch: str
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    context: int
    rope_theta: float
    rms_eps: float
    vocab_size: int
    tied: bool


def hyperparameters(config: Mapping[str, Any]) -> Hyper:
    """The llama.cpp hyperparameters of a config.json (LayoutError naming what is not supported)."""
    model_type = config.get("model_type")
    if model_type not in ARCHITECTURES:
        raise LayoutError(f"config.json model_type {model_type!r}: tt writes GGUF for {', '.join(ARCHITECTURES)}")
    scaling = config.get("rope_scaling") or {}
    if scaling and scaling.get("rope_type", scaling.get("type")) not in (None, "default"):
        raise LayoutError(f"config.json rope_scaling {scaling!r} is not written to GGUF by tt yet")
    heads = int(config["num_attention_heads"])
    hidden = int(config["hidden_size"])
    theta = config.get("rope_theta") or (config.get("rope_parameters") or {}).get("rope_theta") or 10000.0
    return Hyper(
        arch=ARCHITECTURES[model_type], layers=int(config["num_hidden_layers"]), hidden=hidden,
        intermediate=int(config["intermediate_size"]), heads=heads,
        kv_heads=int(config.get("num_key_value_heads") or heads),
        head_dim=int(config.get("head_dim") or hidden // heads),
        context=int(config.get("max_position_embeddings") or 0), rope_theta=float(theta),
        rms_eps=float(config.get("rms_norm_eps") or 1e-6), vocab_size=int(config["vocab_size"]),
        tied=bool(config.get("tie_word_embeddings", False)),
    )


def permute_qk(weight, heads: int):
    """Hugging Face's rotate-half q/k rows in llama.cpp's interleaved order (per head)."""
    rows = weight.shape[0]
    return (weight.reshape(heads, 2, rows // heads // 2, *weight.shape[1:])
            .swapaxes(1, 2).reshape(weight.shape))


def gguf_tensors(hyper: Hyper, state: Mapping[str, Any]):
    """(gguf name, float32 numpy array) for every weight, in llama.cpp's layout."""
    import gguf
    import numpy as np

    arch = next(a for a, name in gguf.MODEL_ARCH_NAMES.items() if name == hyper.arch)
    names = gguf.get_tensor_name_map(arch, hyper.layers)
    for hf_name in sorted(state):
        if hf_name.endswith("rotary_emb.inv_freq"):
            continue
        if hyper.tied and hf_name == "lm_head.weight":
            continue  # llama.cpp reads the embedding for a missing output.weight
        name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if name is None:
            raise LayoutError(f"weight {hf_name!r} has no place in llama.cpp's {hyper.arch} layout")
        array = np.ascontiguousarray(state[hf_name], dtype=np.float32)
        if hyper.arch in PERMUTES_QK and hf_name.endswith(("q_proj.weight", "k_proj.weight")):
            heads = hyper.heads if hf_name.endswith("q_proj.weight") else hyper.kv_heads
            array = np.ascontiguousarray(permute_qk(array, heads))
        yield name, array


def encode(array, quant: str):
    """(data, gguf type) of one tensor at `quant` (1-D tensors stay F32)."""
    import gguf
    import numpy as np

    types = gguf.GGMLQuantizationType
    if array.ndim < 2 or quant == "f32":
        return array.astype(np.float32), types.F32
    wanted = {"f16": types.F16, "bf16": types.BF16, "q8_0": types.Q8_0, "q4_0": types.Q4_0}[quant]
    block = gguf.GGML_QUANT_SIZES[wanted][0]
    if array.shape[-1] % block:
        wanted = types.F16
    if wanted == types.F16:
        return array.astype(np.float16), wanted
    return gguf.quants.quantize(array, wanted), wanted


def file_type(quant: str) -> int:
    import gguf

    kinds = gguf.LlamaFileType
    return {"f32": kinds.ALL_F32, "f16": kinds.MOSTLY_F16, "bf16": kinds.MOSTLY_BF16,
            "q8_0": kinds.MOSTLY_Q8_0, "q4_0": kinds.MOSTLY_Q4_0}[quant]
