"""Batched, greedy, deterministic generation with left padding and a KV cache.

Baseline and candidate use exactly this function with the same settings.
Prompts are rendered with the chat template (runtime.chat) and fitted into
`max_seq_length` instruction first (system message whole, the start of the
user text trimmed: tt_stagekit.promptfit), grouped longest-first into batches, left-padded (the
fill id is runtime.chat.padding's; the attention mask marks padding by position), and decoded until the end-of-turn token or EOS.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional, Sequence

from tt_engine_adapter.runtime import chat
from tt_stagekit import promptfit
from tt_stagekit.protocol import STOP, Interrupted, InvalidInput


def stop_ids(tokenizer: Any) -> list[int]:
    chat.end_of_turn_id(tokenizer)  # evaluation needs the end-of-turn token (a ChatError names what is wrong)
    return chat.stop_ids(tokenizer)


def generation_config(tokenizer: Any, max_new_tokens: int):
    from transformers import GenerationConfig

    return GenerationConfig(
        max_new_tokens=max_new_tokens,
        do_sample=False,
        num_beams=1,
        use_cache=True,
        temperature=None,
        top_p=None,
        top_k=None,
        pad_token_id=chat.pad_token_id(tokenizer),
        eos_token_id=stop_ids(tokenizer),
    )


def generate(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[dict],
    *,
    max_new_tokens: int,
    batch_size: int,
    max_seq_length: int,
    device: str,
    on_batch: Optional[Callable[[int, int, float], None]] = None,
    stats: Optional[dict] = None,
) -> list[dict]:
    """Answer each `{"id", "messages"}` prompt; returns `{"id", "prediction"}` in input order.

    `stats`, when given, receives `trimmed_prompts`: how many prompts lost user text to fit.
    """
    import torch

    pad = chat.pad_token_id(tokenizer)
    config = generation_config(tokenizer, max_new_tokens)
    stops = set(config.eos_token_id)
    encoded, trimmed = [], 0
    for prompt in prompts:
        try:
            ids, cut = chat.encode_prompt(tokenizer, prompt["messages"], max_seq_length)
        except promptfit.PromptTooLong as exc:
            raise InvalidInput(f"prompt {prompt['id']}: " + promptfit.length_message(
                "hyperparameters.max_seq_length", exc.needed, max_seq_length, "its instruction")) from None
        encoded.append(ids)
        trimmed += cut
    if stats is not None:
        stats["trimmed_prompts"] = trimmed
    order = sorted(range(len(prompts)), key=lambda i: (-len(encoded[i]), i))
    answers: dict[int, str] = {}
    model.eval()
    started = time.perf_counter()
    done = 0
    for start in range(0, len(order), batch_size):
        if STOP.requested:  # nothing worth saving: a rerun of the stage answers every prompt again
            raise Interrupted(f"{STOP.signal_name}: evaluation stopped after {done}/{len(prompts)} prompts")
        batch = order[start:start + batch_size]
        width = max(len(encoded[i]) for i in batch)
        ids = torch.full((len(batch), width), pad, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, index in enumerate(batch):
            seq = encoded[index]
            ids[row, width - len(seq):] = torch.tensor(seq, dtype=torch.long)
            mask[row, width - len(seq):] = 1
        with torch.inference_mode():
            out = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), generation_config=config)
        for row, index in enumerate(batch):
            new = out[row, width:].tolist()
            cut = next((k for k, tok in enumerate(new) if tok in stops), len(new))
            answers[index] = tokenizer.decode(new[:cut], skip_special_tokens=True).strip()
        done += len(batch)
        if on_batch:
            on_batch(done, len(prompts), time.perf_counter() - started)
    return [{"id": prompts[i]["id"], "prediction": answers[i]} for i in range(len(prompts))]
