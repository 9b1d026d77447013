"""The reinforcement (GRPO) prompts: the run's TRAINING rows only (examples of the training split and synthetic
rows), each with the answer it teaches as the graders' reference; never a held-out prompt. Runs in the engine
environment.

The rows are the prepare stage's `train` file (the host gave that stage the training split, never the held-out
one). As a second line, every prompt is checked against the held-out prompts this stage can see (the request's
`eval_prompts`, when sent, and the prepared validation and test rows): a match stops the stage before any
rollout. Prompts are rendered as evaluation renders them (`chat.encode_prompt`: the compiled system message,
the template's generation prompt, fitted into `max_seq_length - max_new_tokens`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from tt_engine_adapter.runtime import chat
from tt_engine_adapter.runtime.data import with_system
from tt_stagekit.sameness import normalize_prompt
from tt_stagekit.protocol import StageError


@dataclass(frozen=True)
class Prompt:
    id: str
    user: str  # the last user message (what the held-out check compares)
    reference: str  # the row's answer: what the graders score a sample against
    ids: tuple[int, ...]


def _split(messages: Sequence[dict]) -> tuple[list[dict], str]:
    """(the chat up to the last assistant answer, that answer)."""
    last = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
    return list(messages[:last]), messages[last]["content"]


def _user(messages: Sequence[dict]) -> str:
    return next(m["content"] for m in reversed(messages) if m["role"] == "user")


def held_out_users(eval_prompts: Iterable[dict], held_out_rows: Iterable[dict]) -> set[str]:
    """The normalised user text of every held-out prompt this stage can see."""
    out = {normalize_prompt(_user(p["messages"])) for p in eval_prompts}
    out |= {normalize_prompt(_user(r["messages"])) for r in held_out_rows}
    return out


def training_prompts(tokenizer: Any, rows: Sequence[dict], system_message: str, max_prompt_tokens: int,
                     held_out: set[str]) -> list[Prompt]:
    """The training rows as GRPO prompts; a row whose prompt is a held-out prompt is refused (a bug upstream)."""
    prompts = []
    for row in rows:
        messages, reference = _split(with_system(system_message, row["messages"]))
        user = _user(messages)
        if normalize_prompt(user) in held_out:
            raise StageError(f"training row {row['id']} has the prompt of a held-out row; it never reaches a "
                             "rollout. The prepared rows and the held-out split overlap: rerun the prepare stage "
                             "(tt run --from prepare) and report this as a bug")
        ids, _ = chat.encode_prompt(tokenizer, messages, max_prompt_tokens)
        prompts.append(Prompt(row["id"], user, reference, tuple(ids)))
    return prompts
