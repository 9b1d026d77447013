"""The real base with a random LoRA (rsLoRA on every linear layer) and four movie-review chat rows sharing one
system prompt: what tests/test_logits_only.py and tests/test_prefix_tree.py compare their paths on."""

from __future__ import annotations

import torch

from tt_engine_adapter.runtime import chat

SYSTEM = "Rate the movie review: thumbs up or thumbs down."
REVIEWS = [("a warm, funny and moving film", "thumbs up"), ("the plot was dull and slow " * 3, "thumbs down"),
           ("great acting", "thumbs up"), ("I walked out after twenty minutes, bored", "thumbs down")]


def review_lora(real_base, seed: int) -> tuple:
    """(PEFT model in eval mode with seeded random LoRA weights, the encoded rows, the pad id)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(real_base)
    model = AutoModelForCausalLM.from_pretrained(real_base, dtype=torch.float32)
    model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", use_rslora=True,
                                             lora_dropout=0.0, task_type="CAUSAL_LM"))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # B is zero at init: give the adapter weights so every LoRA tensor gets a gradient
        for p in model.parameters():
            if p.requires_grad:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.01)
    model.eval()
    eot = chat.end_of_turn_id(tok)
    rows = [chat.encode_row(tok, f"r{i}", [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text},
                                           {"role": "assistant", "content": label}], 128, eot)
            for i, (text, label) in enumerate(REVIEWS)]
    return model, rows, chat.pad_token_id(tok)


def off(a, b) -> float:
    """The largest difference relative to the largest magnitude when above 1 (float32 sums in another order)."""
    return float((a.detach() - b.detach()).abs().max()) / max(float(b.detach().abs().max()), 1.0)
