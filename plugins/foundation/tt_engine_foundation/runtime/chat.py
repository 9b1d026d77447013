"""Chat rendering with the tokenizer's special tokens, and the answer scorer.

A conversation renders as
`<|bos|> <|system_start|>…<|system_end|> <|user_start|>…<|user_end|> <|assistant_start|>…<|assistant_end|>`.
Only assistant content and its `<|assistant_end|>` are supervised. A chat
longer than the sequence length is fitted instruction first
(tt_stagekit.promptfit): system messages and the supervised answer stay
whole, only user text is trimmed.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

from tt_stagekit import promptfit
from tt_stagekit.protocol import InvalidInput
from tt_stagekit.scoring import normalize_answer as normalize

from tt_engine_foundation.runtime import tokenizer

ROLE_TOKENS = {
    "system": (tokenizer.SYSTEM_START, tokenizer.SYSTEM_END),
    "user": (tokenizer.USER_START, tokenizer.USER_END),
    "assistant": (tokenizer.ASSISTANT_START, tokenizer.ASSISTANT_END),
}


def render(tok, messages: Sequence[Mapping[str, Any]]) -> tuple[list[int], list[int]]:
    """(ids, mask) where mask is 1 on supervised (assistant) tokens."""
    ids = [tokenizer.special_id(tok, tokenizer.BOS)]
    mask = [0]
    for message in messages:
        role = message["role"]
        if role not in ROLE_TOKENS:
            raise ValueError(f"unknown chat role {role!r}")
        start, end = ROLE_TOKENS[role]
        body = tokenizer.encode(tok, message["content"])
        supervised = 1 if role == "assistant" else 0
        ids += [tokenizer.special_id(tok, start)] + body + [tokenizer.special_id(tok, end)]
        mask += [0] + [supervised] * len(body) + [supervised]
    return ids, mask


def token_count(tok, messages: Sequence[Mapping[str, Any]]) -> int:
    """len(render(tok, messages)[0]) without building the lists: BOS, then start + body + end per turn."""
    return 1 + sum(2 + len(tokenizer.encode(tok, m["content"])) for m in messages)


def fit_prompt(tok, messages: Sequence[Mapping[str, Any]], max_len: int) -> tuple[list[int], bool]:
    """(prompt ids ending with <|assistant_start|>, whether user text was trimmed) in at most max_len tokens.

    Instruction first (tt_stagekit.promptfit): system messages stay whole; the
    oldest turns, then the start of the last user message go. Raises
    promptfit.PromptTooLong when the system messages and an empty user message do not fit.
    """
    prompt = list(messages[:-1]) if messages and messages[-1]["role"] == "assistant" else list(messages)
    fitted = promptfit.fit_chat(prompt, lambda m: token_count(tok, m) + 1, max_len, keep_answer=False)
    ids, _ = render(tok, fitted.messages)
    return ids + [tokenizer.special_id(tok, tokenizer.ASSISTANT_START)], fitted.trimmed


def render_prompt(tok, messages: Sequence[Mapping[str, Any]], max_len: int) -> list[int]:
    """The prompt ids of `fit_prompt`."""
    return fit_prompt(tok, messages, max_len)[0]


def fit_example(tok, messages: Sequence[Mapping[str, Any]], max_len: int) -> tuple[list[int], list[int], bool]:
    """(ids, mask, trimmed) of a training row in at most max_len tokens: the system message and the answer
    whole, the start of the user text trimmed (promptfit.PromptTooLong when even an empty one does not fit)."""
    fitted = promptfit.fit_chat(messages, lambda m: token_count(tok, m), max_len, keep_answer=True)
    ids, mask = render(tok, fitted.messages)
    return ids, mask, fitted.trimmed


def floor_length(tok, system_message: str, answer: str) -> int:
    """Tokens of [system, empty user, answer] rendered: the shortest a training row with this answer can be."""
    return token_count(tok, [{"role": "system", "content": system_message},
                        {"role": "user", "content": promptfit.SHORTEST_USER_TEXT},
                        {"role": "assistant", "content": answer}])


def sequence_error(needed_ids: int, sequence_length: int, what: str) -> str:
    """A row of `needed_ids` ids trains as needed_ids - 1 positions (inputs and their shifted targets)."""
    return promptfit.length_message("foundation.sequence_length", needed_ids - 1, sequence_length, what)


_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")


def last_number(text: str):
    found = _NUMBER.findall(text)
    if not found:
        return None
    value = found[-1].replace(",", "")
    try:
        return float(value)
    except ValueError:
        return None


def is_numeric(reference: str) -> bool:
    return _NUMBER.fullmatch(normalize(reference).replace(" ", "")) is not None


def reward(prediction: str, reference: str) -> float:
    """1.0 for an exact (normalized) answer; for numeric references, the last number must equal it."""
    if is_numeric(reference):
        got = last_number(prediction)
        want = last_number(reference)
        return 1.0 if got is not None and want is not None and got == want else 0.0
    return 1.0 if normalize(prediction) == normalize(reference) else 0.0


def check_fits(tok, sequence_length: int, system: str, answers: Sequence[str]) -> None:
    """Exit 2 (InvalidInput) when the instruction, an empty user message and the longest answer (the
    examples' and the training rows', `FoundationRequest.answers`) cannot fit foundation.sequence_length:
    the exact check, once the tokenizer exists (docs/foundation.md)."""
    needed = max((floor_length(tok, system, answer) for answer in answers), default=0)
    if needed > sequence_length + 1:
        raise InvalidInput(sequence_error(needed, sequence_length, "the instruction and the longest example answer"))
