"""From teacher answers to synthetic rows: ask for inputs, drop what may not be trained on, answer, check.

The loop, deterministic given the answers (so the cache makes a repeated run byte-identical, and a resumed
one asks only what it had not received):

1. while rows are missing and no candidate input waits, ask `ceil(missing / inputs_per_request)` input
   rounds (prompts.inputs_request); each proposed input is dropped when its normalized prompt equals a
   held-out prompt (`held_out`), a training example (`training_example`) or an earlier input
   (`duplicate`); a reply that is not a JSON array of strings counts as `bad_input_reply`;
2. answer the next `missing` candidates (prompts.answer_request); an answer failing the checks is dropped
   by the check's name (checks.py); the others become rows, in order, until `rows` are kept.

It ends short of `rows` when the request budget (`max_requests`, cached requests included so the outcome
never depends on the cache) is used up or three input batches in a row bring nothing new; the outcome says so.
Batch sizes depend only on counts, never on concurrency or timing.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from tt_host.spec.synthesis import Synthesis
from tt_host.synthesis.cache import request_hash
from tt_host.synthesis.checks import AnswerChecks
from tt_host.synthesis.client import TeacherClient, completion_text
from tt_host.synthesis.prompts import answer_request, inputs_request, parse_inputs, training_pairs
from tt_host.synthesis.rows import SOURCE
from tt_host.spec.split import normalize_prompt

STALE_BATCHES = 3  # input batches in a row that bring no new input before the stage gives up


@dataclass
class Generated:
    """What the loop produced: the kept rows, how many inputs the teacher proposed, drops by reason, the
    requests asked (cached or not), and why it stopped short (None when it kept `rows`)."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    proposed: int = 0
    dropped: Counter = field(default_factory=Counter)
    asked: int = 0
    short: Optional[str] = None


def row_id(prompt: str) -> str:
    return "syn-" + hashlib.sha256(normalize_prompt(prompt).encode("utf-8")).hexdigest()[:16]


def generate(settings: Synthesis, model: str, system_message: str, train_rows: Sequence[dict],
             held_out_prompts: Sequence[str], client: TeacherClient,
             progress: Callable[[Generated], None] = lambda done: None, out: Optional[Generated] = None) -> Generated:
    """Rows until `settings.rows` are kept (see the module's docstring). `out`, when given, is filled as the
    loop goes, so a caller that stops it (client.Stopped) still holds what was kept."""
    pairs = training_pairs(train_rows)
    held = {normalize_prompt(prompt) for prompt in held_out_prompts}
    trained = {normalize_prompt(prompt) for prompt, _ in pairs}
    seen: set[str] = set()
    waiting: deque[str] = deque()
    out = out if out is not None else Generated()
    budget, round_index, stale = settings.request_budget, 0, 0
    judge = AnswerChecks(settings.checks, client.stop)  # its regex child ends with the loop (or when collected)
    while len(out.rows) < settings.rows:
        missing = settings.rows - len(out.rows)
        left = budget - out.asked
        if left <= 0:
            out.short = f"the request budget (synthesis.max_requests = {budget}) is used up"
            break
        if not waiting:
            count = min(left, max(1, math.ceil(missing / settings.inputs_per_request)))
            bodies = [inputs_request(model, system_message, pairs, settings, r)
                      for r in range(round_index, round_index + count)]
            round_index += count
            out.asked += count
            fresh = 0
            for reply in client.complete(bodies):
                proposed = parse_inputs(completion_text(reply) or "")
                if proposed is None:
                    out.dropped["bad_input_reply"] += 1
                    continue
                for prompt in proposed:
                    out.proposed += 1
                    key = normalize_prompt(prompt)
                    reason = ("held_out" if key in held else "training_example" if key in trained
                              else "duplicate" if key in seen else None)
                    if reason:
                        out.dropped[reason] += 1
                        continue
                    seen.add(key)
                    waiting.append(prompt)
                    fresh += 1
            stale = 0 if fresh else stale + 1
            if stale >= STALE_BATCHES:
                out.short = f"{STALE_BATCHES} input batches in a row proposed nothing new"
                break
            progress(out)
            continue
        batch = [waiting.popleft() for _ in range(min(missing, len(waiting), left))]
        bodies = [answer_request(model, system_message, prompt, settings) for prompt in batch]
        out.asked += len(bodies)
        for prompt, body, reply in zip(batch, bodies, client.complete(bodies)):
            answer = completion_text(reply) or ""
            reason = judge(answer)
            if reason:
                out.dropped[reason] += 1
                continue
            out.rows.append({"id": row_id(prompt), "source": SOURCE, "request_sha256": request_hash(client.endpoint, body),
                             "messages": [{"role": "system", "content": system_message},
                                          {"role": "user", "content": prompt},
                                          {"role": "assistant", "content": answer}]})
        progress(out)
    judge.close()
    return out
