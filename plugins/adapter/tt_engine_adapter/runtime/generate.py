"""Batched, greedy, deterministic generation with left padding and a KV cache.

Baseline and candidate use exactly this function with the same settings.
Prompts are rendered with the chat template (runtime.chat) and fitted into
`max_seq_length` instruction first (system message whole, the start of the
user text trimmed: tt_stagekit.promptfit), grouped longest-first into batches, left-padded (the
fill id is runtime.chat.padding's; the attention mask marks padding by position), and decoded until the end-of-turn token or EOS.
The ids a batch's prompts share at their start (the system prompt, the chat template) run once and their cache is
repeated to the rows (decode.prefix), where the model allows (`decode.prefix.usable`; else today's path); greedy
tokens are the same either way (tests/test_shared_prefix_generate.py).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional, Sequence

from tt_engine_adapter.decode import prefix as shared_prefix
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
    share_prefix: bool = True,
) -> list[dict]:
    """Answer each `{"id", "messages"}` prompt; returns `{"id", "prediction"}` in input order.

    `stats`, when given, receives `trimmed_prompts`: how many prompts lost user text to fit, and
    `shared_prefix_rows`: how many rows ran after a prefix shared with their batch (`share_prefix=False`, or a
    model `decode.prefix.usable` refuses, runs every row whole).
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
    done = shared_rows = 0
    share_prefix = share_prefix and shared_prefix.usable(model) is None
    for start in range(0, len(order), batch_size):
        if STOP.requested:  # nothing worth saving: a rerun of the stage answers every prompt again
            raise Interrupted(f"{STOP.signal_name}: evaluation stopped after {done}/{len(prompts)} prompts")
        batch = order[start:start + batch_size]
        with torch.inference_mode():
            out, width, shared = _generate(torch, model, [encoded[i] for i in batch], pad, config, device,
                                           share_prefix)
        shared_rows += len(batch) if shared else 0
        for row, index in enumerate(batch):
            new = out[row, width:].tolist()
            cut = next((k for k, tok in enumerate(new) if tok in stops), len(new))
            answers[index] = tokenizer.decode(new[:cut], skip_special_tokens=True).strip()
        done += len(batch)
        if on_batch:
            on_batch(done, len(prompts), time.perf_counter() - started)
    if stats is not None:
        stats["shared_prefix_rows"] = shared_rows
    return [{"id": prompts[i]["id"], "prediction": answers[i]} for i in range(len(prompts))]


def _generate(torch: Any, model: Any, prompts: list[list[int]], pad: int, config: Any, device: str,
              share_prefix: bool) -> tuple[Any, int, bool]:
    """(the generated ids `[rows, width + new]`, width, whether a prefix was shared): the batch's prompts laid
    out in `width` columns, left padded, or their shared prefix run once and each row's padding after it."""
    length = shared_prefix.common(prompts) if share_prefix else 0
    if length:
        cache = shared_prefix.PrefixCache.build(model, prompts[0][:length], len(prompts), device)
        ids, mask = cache.inputs(prompts, pad)
        out = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), generation_config=config,
                             **{cache.kwarg: cache.cache})
        return out, ids.shape[1], True
    width = max(len(seq) for seq in prompts)
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, seq in enumerate(prompts):
        ids[row, width - len(seq):] = torch.tensor(seq, dtype=torch.long)
        mask[row, width - len(seq):] = 1
    out = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), generation_config=config)
    return out, width, False
