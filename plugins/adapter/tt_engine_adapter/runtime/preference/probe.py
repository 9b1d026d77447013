"""The preference stage's probe: a few TRAINING prompts answered greedily (runtime.generate, the evaluation's
decoding) by the SFT adapter before the first step and by the tuned adapter after the last, graded by the spec's
graders against each row's own answer; a lower mean after is the warning that names the setting to change first.
Runs in the engine environment.

The probe is the first `PROBE_PROMPTS` rows of the prepare stage's training split, in their order (the held-out
prompts never reach the preference stage). Greedy answers depend only on the weights, so the SFT side is the same
on a resumed stage: it is answered before the checkpoint is restored (the model is then the SFT adapter as loaded).
"""

from __future__ import annotations

from typing import Any, Sequence

PROBE_PROMPTS = 16


def probe_rows(train_rows: Sequence[dict]) -> list[dict]:
    return list(train_rows[:PROBE_PROMPTS])


def score(model: Any, tokenizer: Any, rows: Sequence[dict], graders: Any, hp: Any, device: str) -> float:
    """The graders' mean score (GraderSet.reward, in [0, 1]) of the model's greedy answers to `rows`' prompts."""
    from tt_engine_adapter.runtime.generate import generate

    answers = generate(model, tokenizer, [{"id": r["id"], "messages": r["messages"][:-1]} for r in rows],
                       max_new_tokens=hp.max_new_tokens, batch_size=hp.eval_batch_size,
                       max_seq_length=hp.max_seq_length, device=device)
    rewards = [graders.reward(a["prediction"], r["messages"][-1]["content"]) for a, r in zip(answers, rows)]
    return round(sum(rewards) / len(rewards), 6)


def worse_note(before: float, after: float, prompts: int, pref: Any, steps: int) -> str:
    """The warning when the preference stage left the model worse than SFT on the probe prompts: change first
    `preference.sft_weight` above 0, or, when it is already, a lower learning rate (docs/adapter.md)."""
    first = (f"Change first preference.sft_weight above 0 (now 0; 1.0 keeps the chosen answers likely); then a lower "
             f"preference.learning_rate (now {pref.learning_rate:g})") if not pref.sft_weight else (
             f"preference.sft_weight is {pref.sft_weight:g} already (a higher one keeps the chosen answers likelier): "
             f"change first a lower preference.learning_rate (now {pref.learning_rate:g})")
    return (f"{pref.loss.upper()} made the model WORSE than SFT on the probe prompts: the graders' mean score of "
            f"greedy answers to {prompts} training prompt(s) fell from {before} (the SFT adapter) to {after} after "
            f"step {steps}. {first}, then a higher preference.beta (now {pref.beta:g}); docs/adapter.md \"When "
            f"tuning makes it worse\"")
