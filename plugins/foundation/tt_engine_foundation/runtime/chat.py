"""Chat rendering with the tokenizer's special tokens, and the answer scorer.

A conversation renders as
`<|bos|> <|system_start|>…<|system_end|> <|user_start|>…<|user_end|> <|assistant_start|>…<|assistant_end|>`.
Only assistant content and its `<|assistant_end|>` are supervised.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

from tt_stagekit.scoring import normalize_answer as normalize

from . import tokenizer as T

ROLE_TOKENS = {
    "system": (T.SYSTEM_START, T.SYSTEM_END),
    "user": (T.USER_START, T.USER_END),
    "assistant": (T.ASSISTANT_START, T.ASSISTANT_END),
}


def render(tok, messages: Sequence[Mapping[str, Any]]) -> tuple[list[int], list[int]]:
    """(ids, mask) where mask is 1 on supervised (assistant) tokens."""
    ids = [T.special_id(tok, T.BOS)]
    mask = [0]
    for message in messages:
        role = message["role"]
        if role not in ROLE_TOKENS:
            raise ValueError(f"unknown chat role {role!r}")
        start, end = ROLE_TOKENS[role]
        body = T.encode(tok, message["content"])
        supervised = 1 if role == "assistant" else 0
        ids += [T.special_id(tok, start)] + body + [T.special_id(tok, end)]
        mask += [0] + [supervised] * len(body) + [supervised]
    return ids, mask


def render_prompt(tok, messages: Sequence[Mapping[str, Any]], max_len: int) -> list[int]:
    """Prompt ids ending with <|assistant_start|>, oldest tokens dropped beyond max_len (BOS kept)."""
    ids, _ = render(tok, [m for m in messages if m["role"] != "assistant"])
    ids.append(T.special_id(tok, T.ASSISTANT_START))
    if len(ids) > max_len:
        ids = ids[:1] + ids[len(ids) - (max_len - 1) :]
    return ids


def truncate_example(ids: list[int], mask: list[int], max_len: int) -> tuple[list[int], list[int]]:
    """Fit ids into max_len: drop the oldest prompt tokens first, then the end of the answer."""
    if len(ids) <= max_len:
        return ids, mask
    first = mask.index(1) if 1 in mask else len(mask)
    prompt_ids, prompt_mask = ids[:first], mask[:first]
    answer_ids, answer_mask = ids[first:], mask[first:]
    keep = max_len - len(answer_ids)
    if keep >= 2:
        prompt_ids, prompt_mask = prompt_ids[-keep:], prompt_mask[-keep:]
    else:
        prompt_ids, prompt_mask = prompt_ids[-2:], prompt_mask[-2:]
        room = max_len - len(prompt_ids)
        answer_ids, answer_mask = answer_ids[:room], answer_mask[:room]
    return prompt_ids + answer_ids, prompt_mask + answer_mask


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
