"""A GPT with exactly the layout and math of Hugging Face `LlamaForCausalLM` (or, with `qk_norm`, `Qwen3ForCausalLM`).

Pure torch. RMSNorm (fp32 variance), rotary embeddings (rope_theta, the
rotate-half convention), SwiGLU MLP, untied lm_head, no biases, and the HF
parameter names (`model.embed_tokens.weight`, `model.layers.N.self_attn.q_proj.weight`,
..., `model.norm.weight`, `lm_head.weight`), so the saved safetensors load into
transformers with the `config.json` written by `hf_config()` and no conversion.

`ModelConfig.qk_norm` (the spec's foundation.qk_norm) adds Qwen3's per-head RMSNorm on queries and keys
(`self_attn.q_norm.weight`, `self_attn.k_norm.weight`, head_dim wide, before the rotary embedding); that
model is exactly `Qwen3ForCausalLM`, and `hf_config()` says so. A config without the field is Llama.

`GPT.gradient_checkpointing` (the spec's foundation.gradient_checkpointing)
recomputes each decoder layer in the backward pass instead of storing its
activations.

Sizes follow nanochat: width = depth * 64, one head per 64 channels.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

HEAD_DIM = 64
ASPECT_RATIO = 64


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    max_position_embeddings: int
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    bos_token_id: int = 0
    eos_token_id: int = 0
    pad_token_id: int = 1
    qk_norm: bool = False

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def to_dict(self) -> dict:
        return asdict(self)


def config_for_depth(depth: int, vocab_size: int, sequence_length: int, qk_norm: bool = False, **ids: int) -> ModelConfig:
    width = depth * ASPECT_RATIO
    heads = max(1, width // HEAD_DIM)
    intermediate = int(math.ceil(8 * width / 3 / 64) * 64)
    return ModelConfig(
        vocab_size=vocab_size,
        hidden_size=width,
        intermediate_size=intermediate,
        num_hidden_layers=depth,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=sequence_length,
        qk_norm=qk_norm,
        **ids,
    )


def derived_learning_rate(depth: int) -> float:
    """AdamW peak learning rate scaled like nanochat's: ∝ 1/sqrt(width), 2e-3 at width 768."""
    return 2e-3 * math.sqrt(768 / (depth * ASPECT_RATIO))


def hf_config(cfg: ModelConfig) -> dict:
    """A transformers `LlamaConfig` dict for this model, or with `qk_norm` a `Qwen3Config` one (no sliding window)."""
    if cfg.qk_norm:
        names = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3"}
        layout = {"use_sliding_window": False, "sliding_window": None, "max_window_layers": cfg.num_hidden_layers}
    else:
        names = {"architectures": ["LlamaForCausalLM"], "model_type": "llama"}
        layout = {"mlp_bias": False}
    return {
        **names,
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": cfg.num_hidden_layers,
        "num_attention_heads": cfg.num_attention_heads,
        "num_key_value_heads": cfg.num_key_value_heads,
        "head_dim": cfg.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": cfg.max_position_embeddings,
        "rms_norm_eps": cfg.rms_norm_eps,
        "rope_theta": cfg.rope_theta,
        "rope_scaling": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        **layout,
        "tie_word_embeddings": False,
        "bos_token_id": cfg.bos_token_id,
        "eos_token_id": cfg.eos_token_id,
        "pad_token_id": cfg.pad_token_id,
        "torch_dtype": "float32",
        "use_cache": True,
    }


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.variance_epsilon = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.to(torch.float32)
        variance = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * x.to(dtype)


def rotary_cos_sin(cfg: ModelConfig, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin for positions (B, T) exactly as HF LlamaRotaryEmbedding computes them."""
    dim = cfg.head_dim
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64, device=positions.device).float() / dim))
    freqs = positions[..., None].float() * inv_freq[None, None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    cos = cos.unsqueeze(1)  # (B, 1, T, D)
    sin = sin.unsqueeze(1)
    return (x * cos) + (rotate_half(x) * sin)


class KVCache:
    """Per-layer key/value buffers for batched generation."""

    def __init__(self, cfg: ModelConfig, batch: int, max_len: int, device, dtype) -> None:
        shape = (batch, cfg.num_key_value_heads, max_len, cfg.head_dim)
        self.k = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(cfg.num_hidden_layers)]
        self.v = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(cfg.num_hidden_layers)]
        self.length = 0

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        start, end = self.length, self.length + k.shape[2]
        self.k[layer][:, :, start:end] = k
        self.v[layer][:, :, start:end] = v
        return self.k[layer][:, :, :end], self.v[layer][:, :, :end]


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        h, d, kv = cfg.num_attention_heads, cfg.head_dim, cfg.num_key_value_heads
        self.q_proj = nn.Linear(cfg.hidden_size, h * d, bias=False)
        self.k_proj = nn.Linear(cfg.hidden_size, kv * d, bias=False)
        self.v_proj = nn.Linear(cfg.hidden_size, kv * d, bias=False)
        self.o_proj = nn.Linear(h * d, cfg.hidden_size, bias=False)
        if cfg.qk_norm:  # Qwen3: each head's query and key normalised over its own channels
            self.q_norm = RMSNorm(d, cfg.rms_norm_eps)
            self.k_norm = RMSNorm(d, cfg.rms_norm_eps)

    def forward(self, x, cos, sin, layer: int, cache: Optional[KVCache], mask: Optional[torch.Tensor]):
        b, t, _ = x.shape
        d = self.cfg.head_dim
        q = self.q_proj(x).view(b, t, -1, d)
        k = self.k_proj(x).view(b, t, -1, d)
        if self.cfg.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        v = self.v_proj(x).view(b, t, -1, d).transpose(1, 2)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        if cache is not None:
            k, v = cache.update(layer, k, v)
        groups = self.cfg.num_attention_heads // self.cfg.num_key_value_heads
        if groups > 1:
            k = k.repeat_interleave(groups, dim=1)
            v = v.repeat_interleave(groups, dim=1)
        if mask is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.o_proj(y.transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, x, cos, sin, layer, cache, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, layer, cache, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaBody(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class GPT(nn.Module):
    """LlamaForCausalLM-compatible decoder."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.model = LlamaBody(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        # Recompute each decoder layer's activations in the backward pass instead of keeping them
        # (torch.utils.checkpoint, non-reentrant): less memory, one more forward; same loss and gradients.
        self.gradient_checkpointing = False

    @torch.no_grad()
    def init_weights(self, seed: int) -> None:
        """Deterministic nanochat-like init: residual outputs zero, small lm_head."""
        gen = torch.Generator(device="cpu").manual_seed(seed)
        for name, p in self.named_parameters():
            if name.endswith("norm.weight"):  # the layer norms, model.norm and qk_norm's q_norm / k_norm
                p.fill_(1.0)
            elif name == "model.embed_tokens.weight":
                p.copy_(torch.randn(p.shape, generator=gen))
            elif name == "lm_head.weight":
                p.copy_(torch.randn(p.shape, generator=gen) * 0.001)
            elif name.endswith("o_proj.weight") or name.endswith("down_proj.weight"):
                p.zero_()
            else:
                bound = math.sqrt(3.0) * 0.5 / math.sqrt(p.shape[1])
                p.copy_(torch.rand(p.shape, generator=gen) * 2 * bound - bound)

    def forward(
        self,
        idx: torch.Tensor,
        positions: Optional[torch.Tensor] = None,
        cache: Optional[KVCache] = None,
        mask: Optional[torch.Tensor] = None,
        where: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        """Logits (B, T, V) in float32. positions default to 0..T-1 (after the cache).

        `where`, a bool (B, T) mask, asks for the logits at those positions only: (N, V), N = where.sum(), in
        row-major order (the order of `tensor[where]`). The hidden states are gathered before the final norm
        (per position, so gathering first changes no number), and the norm, the head and the fp32 upcast run
        on those N positions alone: what a loss that reads only supervised positions needs (runtime/sft.py,
        runtime/rl.py)."""
        b, t = idx.shape
        if positions is None:
            start = cache.length if cache is not None else 0
            positions = torch.arange(start, start + t, device=idx.device).unsqueeze(0).expand(b, t)
        x = self.model.embed_tokens(idx)
        cos, sin = rotary_cos_sin(self.cfg, positions, x.dtype)
        if cache is not None and mask is None and cache.length > 0:
            # Decoding with a cache and no padding: each new token sees everything before it.
            total = cache.length + t
            mask = torch.ones(t, total, dtype=torch.bool, device=idx.device).tril(diagonal=cache.length)
            mask = mask[None, None]
        recompute = self.gradient_checkpointing and self.training and cache is None and torch.is_grad_enabled()
        for i, layer in enumerate(self.model.layers):
            if recompute:
                x = checkpoint(layer, x, cos, sin, i, None, mask, use_reentrant=False)
            else:
                x = layer(x, cos, sin, i, cache, mask)
        if cache is not None:
            cache.length += t
        if where is not None:
            x = x[where]
        x = self.model.norm(x)
        return self.lm_head(x).float()

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def flops_per_token(self, seq_len: int) -> float:
        """nanochat's estimate: 6 * non-embedding params + attention 12 * L * H * D * T."""
        cfg = self.cfg
        n = self.num_params() - self.model.embed_tokens.weight.numel()
        return 6.0 * n + 12.0 * cfg.num_hidden_layers * cfg.num_attention_heads * cfg.head_dim * seq_len
