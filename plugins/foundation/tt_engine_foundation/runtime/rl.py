"""On-policy RL after SFT: seeded sampling, exact-answer reward, group-mean baseline (REINFORCE).

Each step takes `batch_size` training prompts in a seeded order, samples
`SAMPLES_PER_PROMPT` answers each at temperature 1 with a seeded generator,
rewards them with the evaluation's scorer (normalized exact match; for numeric
references the last number), and maximizes advantage-weighted log-likelihood
of the sampled tokens, the advantage being reward minus the mean reward of
the same prompt's samples.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from tt_stagekit import promptfit
from tt_stagekit.protocol import Interrupted, InvalidInput, stop_requested

from tt_engine_foundation.runtime import tokenizer
from tt_engine_foundation.runtime.config import FoundationSettings
from tt_engine_foundation.runtime.chat import token_count, fit_prompt, reward
from tt_engine_foundation.runtime.generate import generate
from tt_engine_foundation.runtime.optim import build_adamw, set_lr

SAMPLES_PER_PROMPT = 4
RL_LR_SCALE = 0.2  # RL's peak: a fifth of SFT's (foundation.finetune_learning_rate)


def reference(row: Mapping[str, Any]) -> str:
    answers = [m["content"] for m in row["messages"] if m["role"] == "assistant"]
    return answers[-1] if answers else ""


def max_new_tokens(tok, rows: Sequence[Mapping[str, Any]], sequence_length: int) -> int:
    """Room for answers: the longest training answer plus a margin, at most half the context, and never
    more than the instruction (with an empty user message) leaves: the instruction is never cut for it."""
    longest = max((len(tokenizer.encode(tok, reference(r))) for r in rows), default=8)
    systems = [m for m in (rows[0]["messages"] if rows else []) if m["role"] == "system"]
    instruction = token_count(tok, systems + [{"role": "user", "content": ""}]) + 1  # + <|assistant_start|>
    return max(1, min(longest + 8, sequence_length // 2, sequence_length - instruction))


def fit_prompts(tok, rows: Sequence[Mapping[str, Any]], max_len: int) -> tuple[list[list[int]], int]:
    """Prompt ids of each row fitted instruction first into max_len, and how many lost user text."""
    prompts, trimmed = [], 0
    for row in rows:
        try:
            ids, cut = fit_prompt(tok, row["messages"], max_len)
        except promptfit.PromptTooLong as exc:
            raise InvalidInput(f"prompt {row.get('id')!r}: " + promptfit.length_message(
                "foundation.sequence_length", exc.needed, max_len, "its instruction and the answer budget")) from None
        prompts.append(ids)
        trimmed += cut
    return prompts, trimmed


def check_reachable(tok, rows: Sequence[Mapping[str, Any]], budget: int) -> None:
    """Refuse when no training answer can ever be produced within the generation budget."""
    if not rows:
        raise InvalidInput("RL needs training rows (add examples to the spec, or set foundation.rl_steps to 0)")
    reachable = [r for r in rows if reference(r).strip() and len(tokenizer.encode(tok, reference(r))) + 1 <= budget]
    if not reachable:
        raise InvalidInput(
            f"foundation.rl_steps > 0 but no training answer fits in {budget} generated tokens, so every reward "
            "would be zero; raise foundation.sequence_length or set foundation.rl_steps to 0"
        )


def group_advantages(rewards: torch.Tensor, group: int) -> torch.Tensor:
    """Each sample's reward minus the mean reward of its group (the samples of the same prompt, consecutive)."""
    grouped = rewards.view(-1, group)
    return (grouped - grouped.mean(dim=1, keepdim=True)).reshape(-1)


def run_rl(
    model,
    tok,
    rows: Sequence[Mapping[str, Any]],
    cfg: FoundationSettings,
    peak_lr: float,
    device,
    autocast_dtype: Optional[torch.dtype],
    on_step: Optional[Callable[[int, int, float, float], None]] = None,
    stats: Optional[dict] = None,
) -> list[tuple[int, float]]:
    """RL steps on `model` in place; returns the mean rewards. `stats` receives `trimmed_prompts` and `prompt_tokens`
    (the room a prompt has)."""
    seq = cfg.sequence_length
    steps = cfg.rl_steps
    seed = cfg.seed
    budget = max_new_tokens(tok, rows, seq)
    check_reachable(tok, rows, budget)
    stop_id, pad_id = tokenizer.special_id(tok, tokenizer.ASSISTANT_END), tokenizer.special_id(tok, tokenizer.PAD)
    prompts, trimmed = fit_prompts(tok, rows, seq - budget)
    if stats is not None:
        stats.update(trimmed_prompts=trimmed, prompt_tokens=seq - budget)
    refs = [reference(r) for r in rows]
    per_step = min(cfg.batch_size, len(rows))
    optimizer = build_adamw(model, peak_lr * RL_LR_SCALE, 0.0, device)
    clip = cfg.gradient_clip
    rewards: list[tuple[int, float]] = []
    order = np.random.default_rng([seed, 2, 0]).permutation(len(rows))
    cursor, epoch = 0, 0
    gen = torch.Generator(device=device)
    for step in range(steps):
        picked = []
        for _ in range(per_step):
            if cursor >= len(order):
                epoch += 1
                order = np.random.default_rng([seed, 2, epoch]).permutation(len(rows))
                cursor = 0
            picked.append(int(order[cursor]))
            cursor += 1
        batch_prompts = [prompts[i] for i in picked for _ in range(SAMPLES_PER_PROMPT)]
        gen.manual_seed(seed * 1_000_003 + step)
        samples = generate(model, batch_prompts, budget, stop_id, pad_id, device, temperature=1.0,
                           generator=gen, autocast_dtype=autocast_dtype)
        texts = [tok.decode([t for t in s if t != stop_id], skip_special_tokens=True) for s in samples]
        r = torch.tensor([reward(texts[k], refs[picked[k // SAMPLES_PER_PROMPT]]) for k in range(len(texts))])
        advantage = group_advantages(r, SAMPLES_PER_PROMPT)
        mean_reward = float(r.mean())
        rewards.append((step + 1, mean_reward))
        lr = peak_lr * RL_LR_SCALE * (1.0 - step / max(1, steps))
        if bool((advantage != 0).any()):
            set_lr(optimizer, lr)
            model.train()
            loss = policy_loss(model, batch_prompts, samples, advantage, pad_id, device, autocast_dtype)
            loss.backward()
            if clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        if on_step is not None:
            on_step(step + 1, steps, mean_reward, lr)
        if stop_requested():
            raise Interrupted(f"RL stopped at step {step + 1}; it restarts from the SFT model on resume")
    return rewards


def policy_loss(model, prompts, samples, advantage, pad_id, device, autocast_dtype) -> torch.Tensor:
    """Minus the advantage-weighted log-likelihood of each sample's tokens (prompts carry no weight)."""
    seqs = [p + s for p, s in zip(prompts, samples)]
    width = max(len(s) for s in seqs) - 1
    x = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    weight = torch.zeros((len(seqs), width))
    y = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    sampled = torch.zeros((len(seqs), width), dtype=torch.bool)  # positions that predict a sampled token
    for b, (prompt, sample) in enumerate(zip(prompts, samples)):
        full = prompt + sample
        n = len(full) - 1
        x[b, :n] = torch.tensor(full[:-1])
        y[b, :n] = torch.tensor(full[1:])
        weight[b, len(prompt) - 1 : n] = float(advantage[b])
        sampled[b, len(prompt) - 1 : n] = True
    x, y, weight, sampled = x.to(device), y.to(device), weight.to(device), sampled.to(device)
    use = autocast_dtype is not None and device.type == "cuda"
    with torch.autocast(device_type=device.type, dtype=autocast_dtype or torch.bfloat16, enabled=use):
        logits = model(x, where=sampled)  # the head on the sampled tokens' positions alone
    logp = -F.cross_entropy(logits.float(), y[sampled], reduction="none")  # (N,) sampled tokens
    tokens = max(1, int(sum(len(s) for s in samples)))
    return -(logp * weight[sampled]).sum() / tokens
