"""Batched generation with a KV cache and left padding (greedy or seeded sampling)."""

from __future__ import annotations

from typing import Optional

import torch

from tt_engine_foundation.runtime.model import GPT, KVCache


@torch.no_grad()
def generate(
    model: GPT,
    prompts: list[list[int]],
    max_new_tokens: int,
    stop_id: int,
    pad_id: int,
    device,
    temperature: float = 0.0,
    generator: Optional[torch.Generator] = None,
    autocast_dtype: Optional[torch.dtype] = None,
) -> list[list[int]]:
    """New token ids per prompt (the stop token is kept when produced)."""
    if not prompts:
        return []
    model.eval()
    batch = len(prompts)
    width = max(len(p) for p in prompts)
    idx = torch.full((batch, width), pad_id, dtype=torch.long)
    valid = torch.zeros((batch, width), dtype=torch.bool)
    for b, prompt in enumerate(prompts):
        idx[b, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
        valid[b, width - len(prompt) :] = True
    idx, valid = idx.to(device), valid.to(device)
    positions = (valid.long().cumsum(dim=1) - 1).clamp(min=0)
    causal = torch.ones(width, width, dtype=torch.bool, device=device).tril()
    eye = torch.eye(width, dtype=torch.bool, device=device)
    # Pad queries attend to themselves only, so no row of the mask is empty (no NaN).
    mask = (causal[None] & valid[:, None, :]) | eye[None]
    cache_dtype = autocast_dtype or next(model.parameters()).dtype
    cache = KVCache(model.cfg, batch, width + max_new_tokens, device, cache_dtype)
    use_autocast = autocast_dtype is not None and device.type == "cuda"
    out: list[list[int]] = [[] for _ in range(batch)]
    done = torch.zeros(batch, dtype=torch.bool, device=device)
    key_valid = valid
    with torch.autocast(device_type=device.type, dtype=autocast_dtype or torch.bfloat16, enabled=use_autocast):
        logits = model(idx, positions=positions, cache=cache, mask=mask[:, None])[:, -1]
        next_pos = positions[:, -1] + 1
        for _ in range(max_new_tokens):
            if temperature <= 0:
                token = logits.argmax(dim=-1)
            else:
                probs = torch.softmax(logits / temperature, dim=-1)
                token = torch.multinomial(probs, 1, generator=generator).squeeze(1)
            token = torch.where(done, torch.full_like(token, pad_id), token)
            for b, value in enumerate(token.tolist()):
                if not done[b]:
                    out[b].append(value)
            done = done | (token == stop_id)
            if bool(done.all()):
                break
            key_valid = torch.cat([key_valid, torch.ones(batch, 1, dtype=torch.bool, device=device)], dim=1)
            step_mask = key_valid[:, None, None, :]
            logits = model(token[:, None], positions=next_pos[:, None], cache=cache, mask=step_mask)[:, -1]
            next_pos = next_pos + 1
    return out
