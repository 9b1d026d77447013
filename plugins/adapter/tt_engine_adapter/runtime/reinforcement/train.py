"""The reinforcement loop (GRPO): per step, groups of sampled answers per training prompt, graded, then one
clipped-objective update; restore, checkpoints and stop by the skeleton every tuning shares (runtime/loop.py).
Runs in the engine environment.

The prompts of every step come from a seeded schedule (each pass over the prompts a seeded shuffle, like the
SFT schedule), each sample has its own seed (`sample_seed`) and dropout is off (the model stays in eval mode,
as TRL's `disable_dropout`), so a run resumed from a checkpoint at step k samples, grades and updates exactly
as an uninterrupted one: the LoRA weights come out byte-identical on CPU.

The reference of the KL term is the SFT adapter itself, kept as a copy of its LoRA tensors (megabytes, not a
second model): its log-probabilities are computed by swapping those tensors in, without gradient, and back.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from tt_engine_adapter.runtime import loop
from tt_engine_adapter.runtime.config import ReinforcementSettings
from tt_engine_adapter.runtime.prefix import Sharing
from tt_engine_adapter.runtime.reinforcement import grpo
from tt_engine_adapter.runtime.reinforcement.prompts import Prompt
from tt_engine_adapter.runtime.rollouts import Generator, Sample
from tt_engine_adapter.runtime.train import build_schedule
from tt_stagekit.protocol import InvalidInput, log


def sample_seed(seed: int, step: int, slot: int, k: int) -> int:
    """The sampler seed of answer `k` to the `slot`-th prompt of 1-based step `step` (0: the probe)."""
    return (seed * 1_000_003 + step * 65_537 + slot * 257 + k) % (2 ** 63)


def schedule(n_prompts: int, rs: ReinforcementSettings, seed: int) -> list[list[int]]:
    """Prompt indices of each step: seeded passes over the training prompts, `prompts_per_step` a step."""
    per_step = min(rs.prompts_per_step, n_prompts)
    passes = math.ceil(rs.steps * per_step / n_prompts) + 1
    steps = build_schedule(n_prompts, per_step, 1, passes, seed)
    steps = [micro[0] for micro in steps if len(micro[0]) == per_step]
    return steps[:rs.steps]


@dataclass
class Group:
    """One step's samples: answers grouped by prompt, their texts and rewards."""

    prompts: list[Prompt]
    answers: list[list[int]]
    texts: list[str]
    rewards: list[float]
    seconds: float


@dataclass
class State:
    step: int = 0
    seconds: float = 0.0
    rollout_seconds: float = 0.0
    rollout_tokens: int = 0
    probe: dict = field(default_factory=dict)  # what `before_first_step` returned (kept in the checkpoints)
    series: dict = field(default_factory=lambda: {"reward": [], "reward_std": [], "loss": [], "kl": [],
                                                  "answer_tokens": [], "zero_std_groups": []})


class Rollouts:
    """Samples and grades groups of answers with the rollout generator."""

    def __init__(self, generator: Generator, tokenizer: Any, rs: ReinforcementSettings, seed: int,
                 reward: Callable[[str, str], float], record: Callable[[int, Prompt], None]):
        self.generator, self.tokenizer, self.rs, self.seed = generator, tokenizer, rs, seed
        self.reward, self.record = reward, record

    def groups(self, step: int, prompts: Sequence[Prompt], record: bool = True) -> Group:
        started = time.perf_counter()
        samples = []
        for slot, prompt in enumerate(prompts):
            if record:
                self.record(step, prompt)
            samples += [Sample(list(prompt.ids), sample_seed(self.seed, step, slot, k))
                        for k in range(self.rs.group_size)]
        answers = self.generator.sample(samples, self.rs.max_new_tokens, self.rs.temperature, self.rs.top_p)
        stops = self.generator.stop_ids
        texts = [self.tokenizer.decode([t for t in a if t not in stops], skip_special_tokens=True).strip()
                 for a in answers]
        references = [p.reference for p in prompts for _ in range(self.rs.group_size)]
        rewards = [float(self.reward(text, ref)) for text, ref in zip(texts, references)]
        return Group(list(prompts), answers, texts, rewards, time.perf_counter() - started)


def probe(rollouts: Rollouts, prompts: Sequence[Prompt], rs: ReinforcementSettings, grader_names: str) -> dict:
    """Sample `probe_groups` groups before the first step; refuse (exit 2) when every group has zero spread."""
    chosen = list(prompts[:rs.probe_groups])
    group = rollouts.groups(0, chosen)
    spreads = grpo.spread(group.rewards, rs.group_size)
    mean = sum(group.rewards) / len(group.rewards)
    if all(s == 0 for s in spreads):
        where = ("every sampled answer already earns the full reward" if mean >= 1 else
                 "no sampled answer earns any reward" if mean <= 0 else
                 f"every answer in a group earns the same reward (mean {mean:.3f})")
        raise InvalidInput(
            f"reinforcement: the probe sampled {len(chosen)} group(s) of {rs.group_size} answers on training prompts "
            f"and the graders ({grader_names}) gave zero spread in every group: {where}. GRPO learns only from "
            f"differences within a group, so this run would learn nothing. Try a higher reinforcement.temperature "
            f"(now {rs.temperature}), a larger reinforcement.group_size (now {rs.group_size}), or graders that give "
            f"partial credit (evaluation.graders, e.g. token F1 or a number with tolerance); or leave out the "
            f"reinforcement block")
    return {"groups": len(chosen), "reward": round(mean, 6), "zero_std_groups": sum(s == 0 for s in spreads),
            "seconds": round(group.seconds, 3)}


def recheck(rollouts: Rollouts, prompts: Sequence[Prompt], rs: ReinforcementSettings, probed: dict) -> dict:
    """After the last step: the probe's groups sampled again with the same prompts and sampler seeds (the probe's
    own, so only the weights differ), graded; `worse` when their mean reward fell below the probe's, which the
    SFT adapter earned. Not logged in the rollout log: the probe logged these prompts."""
    group = rollouts.groups(0, list(prompts[:probed["groups"]]), record=False)
    after = sum(group.rewards) / len(group.rewards)
    return {"groups": probed["groups"], "before": probed["reward"], "after": round(after, 6),
            "worse": round(after, 6) < probed["reward"], "seconds": round(group.seconds, 3)}


def worse_note(check: dict, rs: ReinforcementSettings, steps: int) -> str:
    """The warning when GRPO left the model worse than SFT on the probe rows, and which setting to change first."""
    return (f"GRPO made the model WORSE than SFT on the probe rows: their mean reward fell from {check['before']} "
            f"(the SFT adapter, before the first step) to {check['after']} after step {steps} (the same "
            f"{check['groups']} prompt(s) × {rs.group_size} answers and sampler seeds). Change first a lower "
            f"reinforcement.learning_rate (now {rs.learning_rate:g}); then a reinforcement.kl_beta above 0 (now "
            f"{rs.kl_beta:g}) to hold the model near SFT, or fewer reinforcement.steps (now {rs.steps}); "
            f"docs/adapter.md \"When tuning makes it worse\"")


class ReferenceWeights:
    """The SFT adapter's LoRA tensors, swapped into the model for the KL reference's log-probabilities."""

    def __init__(self, model: Any):
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.saved = [p.detach().clone() for p in self.params]

    def logps(self, compute: Callable[[], Any]) -> Any:
        import torch

        with torch.no_grad():
            current = [p.detach().clone() for p in self.params]
            for p, ref in zip(self.params, self.saved):
                p.copy_(ref)
            try:
                return compute()
            finally:
                for p, now in zip(self.params, current):
                    p.copy_(now)


def batch_tensors(torch: Any, group: Group, group_size: int, pad_id: int, device: str) -> dict:
    """Prompts left-padded, answers right-padded: ids, attention mask, position ids and the answer mask."""
    width_p = max(len(p.ids) for p in group.prompts)
    width_a = max(1, max(len(a) for a in group.answers))
    rows = [(group.prompts[i // group_size].ids, a) for i, a in enumerate(group.answers)]
    ids, attn, answer_mask = [], [], []
    for prompt, answer in rows:
        left, right = width_p - len(prompt), width_a - len(answer)
        ids.append([pad_id] * left + list(prompt) + list(answer) + [pad_id] * right)
        attn.append([0] * left + [1] * (len(prompt) + len(answer)) + [0] * right)
        answer_mask.append([1] * len(answer) + [0] * right)
    ids_t = torch.tensor(ids, device=device)
    attn_t = torch.tensor(attn, device=device)
    positions = (attn_t.cumsum(-1) - 1).clamp(min=0)
    return {"input_ids": ids_t, "attention_mask": attn_t, "position_ids": positions,
            "mask": torch.tensor(answer_mask, dtype=torch.float32, device=device), "n": width_a}


def backward(model: Any, group: Group, rs: ReinforcementSettings, *, micro_batch: int, pad_id: int, device: str,
             reference: Optional[ReferenceWeights], passes: int = 1,
             between: Callable[[], None] = lambda: None, sharing: Optional[Sharing] = None) -> dict:
    """The step's loss over micro-batches of `micro_batch` answers, with its gradients: `passes` times (the old
    log-probabilities are the first pass's own, detached: no optimizer step comes before it), `between()` after
    each pass (the optimizer step). Answers that cannot move the loss are left out (`grpo.learning_rows`); the
    reference's log-probabilities come from one forward for the step where they fit
    (`Sharing.answer_logps_fixed`). Returns the last pass's loss (the sum of the micro-batch shares: the whole
    step's reduction) and the logged means."""
    import torch

    sharing = sharing or Sharing(False, "")
    rewards = torch.tensor(group.rewards, dtype=torch.float32, device=device)
    advantages, _ = grpo.group_advantages(rewards, rs.group_size, rs.scale_rewards)
    full = batch_tensors(torch, group, rs.group_size, pad_id, device)
    n_rows = len(group.answers)
    learning = grpo.learning_rows(advantages, rs.kl_beta)  # without a KL term, advantage 0 gives no gradient
    chunks = sharing.answer_micro_batches(model, full, learning, micro_batch)
    total_tokens = int(full["mask"].sum())

    def logps(part: list) -> Any:  # the rows as a prefix tree (or each group's prompt once), logits on answers
        return sharing.answer_logps(model, full, part, rs.group_size, rs.temperature)

    ref = None
    if reference is not None and chunks:
        ref = reference.logps(lambda: sharing.answer_logps_fixed(model, full, chunks, rs.group_size, rs.temperature))
    old: list = []  # the first pass's own log-probs: the weights do not move before its optimizer step
    kls, clipped, step_loss = [], [], 0.0
    for first in [True] + [False] * (passes - 1):
        step_loss = 0.0
        for index, part in enumerate(chunks):
            current = logps(part)
            if first and passes > 1:
                old.append(current.detach())
            parts = grpo.micro_loss(current, current.detach() if first else old[index],
                                    ref[index] if ref else None, advantages[part], full["mask"][part],
                                    beta=rs.kl_beta, epsilon=rs.epsilon, loss_type=rs.loss_type,
                                    total_answers=n_rows, total_tokens=total_tokens)
            parts.loss.backward()
            step_loss += float(parts.loss.detach())
            tokens = float(full["mask"][part].sum())
            kls.append(parts.kl * tokens)
            clipped.append(parts.clipped * tokens)
        if not chunks:  # no answer to learn from: a zero gradient, so the optimizer steps as it would
            grpo.zero_gradients(model)
        between()
    spreads = grpo.spread(group.rewards, rs.group_size)
    weight = max(total_tokens, 1) * passes  # means over the answer tokens
    return {"loss": step_loss, "kl": sum(kls) / weight, "clip_ratio": sum(clipped) / weight,
            "reward": sum(group.rewards) / n_rows, "reward_std": sum(spreads) / len(spreads),
            "zero_std_groups": sum(s == 0 for s in spreads), "answer_tokens": total_tokens / n_rows}


def update(model: Any, steps: loop.StepLoop, group: Group, rs: ReinforcementSettings, *, micro_batch: int,
           pad_id: int, device: str, reference: Optional[ReferenceWeights], sharing: Optional[Sharing] = None) -> dict:
    """`rs.iterations` optimizer steps on one step's samples; returns the logged means."""
    return backward(model, group, rs, micro_batch=micro_batch, pad_id=pad_id, device=device, reference=reference,
                    passes=rs.iterations, between=lambda: steps.apply_gradients(rs.max_grad_norm), sharing=sharing)


def train(model: Any, prompts: Sequence[Prompt], rollouts: Rollouts, rs: ReinforcementSettings, *, seed: int,
          micro_batch: int, pad_id: int, device: str, checkpoints: loop.Checkpoints, resume: bool,
          on_step: Callable[[int, int, dict], None], before_first_step: Callable[[], dict],
          rewind: Callable[[int], None] = lambda step: None) -> State:
    """Run the GRPO steps on the PEFT `model` in place; Interrupted after a checkpoint on SIGTERM.

    `before_first_step()` (the probe) runs unless a checkpoint is restored; what it returns is kept in the
    checkpoints (`State.probe`). With `resume`, `rewind(step)` is called first with the step of the restored
    checkpoint (0: none), so that the caller drops what it recorded after it: those steps sample again."""
    plan = schedule(len(prompts), rs, seed)
    reference = ReferenceWeights(model) if rs.kl_beta > 0 else None  # before any resumed weights: the SFT adapter
    steps = loop.StepLoop(model, loop.adamw(loop.trainable(model), rs.learning_rate, 0.0), checkpoints, len(plan))
    state = State()
    found = steps.restore(resume)
    if found:
        meta = found[1]
        state = State(step=meta["step"], seconds=meta["seconds"], rollout_seconds=meta["rollout_seconds"],
                      rollout_tokens=meta["rollout_tokens"], probe=meta.get("probe", {}), series=meta["series"])
    if resume:
        rewind(state.step)
    if not found:
        state.probe = before_first_step()
    model.eval()  # no dropout: the gradient flows all the same
    sharing = Sharing.decide(model, packing=False, gradient_checkpointing=False, distributed=False)
    log(sharing.reason.replace("system prompt", "each group's prompt"))

    def meta() -> dict:
        return {"fingerprint": checkpoints.fingerprint, "seconds": state.seconds,
                "rollout_seconds": state.rollout_seconds, "rollout_tokens": state.rollout_tokens,
                "probe": state.probe, "series": state.series, "total_steps": len(plan)}

    def step() -> None:
        started = time.perf_counter()
        group = rollouts.groups(state.step + 1, [prompts[i] for i in plan[state.step]])
        stats = update(model, steps, group, rs, micro_batch=micro_batch, pad_id=pad_id, device=device,
                       reference=reference, sharing=sharing)
        state.step += 1
        state.seconds += time.perf_counter() - started
        state.rollout_seconds += group.seconds
        state.rollout_tokens += sum(len(a) for a in group.answers)
        for key in state.series:
            state.series[key].append([state.step, round(stats[key], 6)])
        on_step(state.step, len(plan), {**stats, "rollout_seconds": group.seconds})

    steps.run(state, step, meta)
    return state
