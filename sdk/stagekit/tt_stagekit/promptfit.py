"""Fit a chat into a token budget, instruction first: one algorithm for every engine. Stdlib only.

The contract (docs/adapter.md, docs/foundation.md, docs/serving.md):

- every system message (the compiled instruction) is kept whole;
- the supervised answer (a training row's last assistant message) is kept whole;
- only user text is trimmed: first the oldest whole turns before the last
  user message (serving's multi-turn conversations), then the start of the
  last user message, keeping its end (the text nearest the answer);
- the shortest possible user text is the empty string: a chat whose
  instruction, empty user message and answer (or answer budget) do not fit
  is refused with `PromptTooLong`, which names how many tokens it needs.

The caller counts tokens: `count(messages)` returns the length of the
messages as its engine renders them (a chat template, special tokens, the
answer's end-of-turn token...) and `limit` is what that length may reach.
The result is the longest fitting text the search finds; a trimmed message
is re-counted, so the returned messages always fit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Sequence

SHORTEST_USER_TEXT = ""

Count = Callable[[list[dict]], int]


class PromptTooLong(ValueError):
    """Even the instruction, the shortest user text and the answer (budget) exceed the limit."""

    def __init__(self, needed: int, limit: int):
        self.needed, self.limit = needed, limit
        super().__init__(f"the instruction and the answer need {needed} tokens with an empty user message; "
                         f"the limit is {limit}")


@dataclass(frozen=True)
class Fitted:
    """The fitted messages and what was removed to fit them."""

    messages: list[dict]
    length: int  # count(messages)
    dropped_turns: int = 0  # whole earlier turns removed (serving)
    trimmed_chars: int = 0  # characters removed from the start of the last user message

    @property
    def trimmed(self) -> bool:
        return bool(self.dropped_turns or self.trimmed_chars)


def _last_user(messages: Sequence[dict], keep_answer: bool) -> int:
    end = len(messages) - 1 if keep_answer else len(messages)
    if keep_answer and (not messages or messages[-1].get("role") != "assistant"):
        raise ValueError("a training row must end with the assistant answer")
    for index in range(end - 1, -1, -1):
        role = messages[index].get("role")
        if role == "user":
            if index != end - 1:
                raise ValueError("the last user message must come right before the answer (or end the prompt)")
            return index
        if role != "system":
            break
    raise ValueError("a chat to fit needs a user message right before the answer (or at the end of the prompt)")


def _turns(messages: Sequence[dict], last_user: int) -> list[list[int]]:
    """Indexes of the droppable earlier messages, grouped in turns (a user message and what follows it)."""
    groups: list[list[int]] = []
    for index in range(last_user):
        if messages[index].get("role") == "system":
            continue  # instructions are never dropped
        if messages[index].get("role") == "user" or not groups:
            groups.append([])
        groups[-1].append(index)
    return groups


def _build(messages: Sequence[dict], drop: set[int], last_user: int, user_text: str) -> list[dict]:
    out = []
    for index, message in enumerate(messages):
        if index in drop:
            continue
        out.append({**message, "content": user_text} if index == last_user else dict(message))
    return out


def fit_chat(messages: Sequence[dict], count: Count, limit: int, *, keep_answer: bool) -> Fitted:
    """Fit `messages` so that `count(...) <= limit`, trimming only user text (see the module docstring).

    `keep_answer`: the last message is a supervised assistant answer (training);
    otherwise the last message is the user's (a prompt to answer).
    """
    messages = [dict(m) for m in messages]
    length = count(messages)
    if length <= limit:
        return Fitted(messages, length)
    last = _last_user(messages, keep_answer)
    text = str(messages[last].get("content", ""))
    turns = _turns(messages, last)
    all_turns = {i for group in turns for i in group}
    floor = _build(messages, all_turns, last, SHORTEST_USER_TEXT)
    needed = count(floor)
    if needed > limit:
        raise PromptTooLong(needed, limit)

    # 1. the fewest oldest whole turns to drop (binary search; dropping more never makes a chat longer)
    low, high = 0, len(turns)  # high: known to need checking with the whole user text
    best = None
    while low <= high and turns:
        mid = (low + high) // 2
        drop = {i for group in turns[:mid] for i in group}
        candidate = _build(messages, drop, last, text)
        n = count(candidate)
        if n <= limit:
            best, high = (mid, candidate, n), mid - 1
        else:
            low = mid + 1
    if best is not None:
        return Fitted(best[1], best[2], dropped_turns=best[0])

    # 2. every earlier turn dropped: keep the longest end of the last user text that fits
    fitted, fitted_len, kept = floor, needed, 0
    low, high = 1, len(text) - 1  # 0 characters fit (the floor); the whole text does not
    while low <= high:
        mid = (low + high) // 2
        candidate = _build(messages, all_turns, last, text[len(text) - mid:])
        n = count(candidate)
        if n <= limit:
            fitted, fitted_len, kept, low = candidate, n, mid, mid + 1
        else:
            high = mid - 1
    return Fitted(fitted, fitted_len, dropped_turns=len(turns), trimmed_chars=len(text) - kept)


_ASCII_SPACE = re.compile(r"[ \t\n\r\x0b\x0c]+")


def words(text: str) -> int:
    """Pieces of `text` between ASCII whitespace: a lower bound on its tokens for any tokenizer that never
    joins two whitespace-separated words into one token (byte-level BPE with a GPT-2/GPT-4/Llama-3 style
    split, SentencePiece that splits on whitespace)."""
    return sum(1 for piece in _ASCII_SPACE.split(text) if piece)


def length_message(field: str, needed: int, limit: int, what: str = "the instruction and the longest answer",
                   exact: bool = True) -> str:
    """The refusal every engine prints: which setting, and how long it must be."""
    amount = f"{needed} tokens" if exact else f"at least {needed} tokens"
    return (f"{field} is {limit}, but {what} need {amount} with an empty user message (only user text is "
            f"trimmed to fit); raise {field} to {needed} or more, or shorten the instruction or the answer")


def trimmed_note(trimmed: int, total: int, what: str, field: str, limit: int) -> str:
    """The report note for rows that lost user text (stage result `notes`)."""
    return (f"{trimmed} of {total} {what} were longer than {field} ({limit} tokens): the start of their user text "
            "was trimmed; the instruction and the answer were kept whole")
