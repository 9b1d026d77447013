"""Render chat rows with the model's own chat template and build supervision.

One rendering path for training, evaluation and serving:
`render_prompt(messages[:-1])` (generation prompt added, thinking switched off
where the template supports it) is exactly the prefix of
`render_conversation(messages)`; the rest is the assistant answer, supervised
up to and including the template's end-of-turn token. Text is tokenized with
`add_special_tokens=False` because the template itself writes BOS and friends.

Too long a chat is fitted instruction first (tt_stagekit.promptfit): the
system message and a training row's answer stay whole, only user text is
trimmed, and a row whose instruction and answer cannot fit is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from tt_stagekit import promptfit

IGNORE_INDEX = -100


class ChatError(Exception):
    """The chat template or a row cannot be rendered/supervised; the message names the row."""


@dataclass(frozen=True)
class Encoded:
    """One tokenized training row: ids, labels (-100 where not supervised)."""

    row_id: str
    input_ids: list[int]
    labels: list[int]
    trimmed: bool  # user text was trimmed to fit max_seq_length

    @property
    def supervised(self) -> int:
        return sum(1 for label in self.labels if label != IGNORE_INDEX)


def _apply(tokenizer: Any, messages: Sequence[dict], add_generation_prompt: bool) -> str:
    if not getattr(tokenizer, "chat_template", None):
        raise ChatError("the tokenizer has no chat template; a chat model folder must ship one")
    try:
        return tokenizer.apply_chat_template(
            list(messages), tokenize=False, add_generation_prompt=add_generation_prompt, enable_thinking=False
        )
    except Exception as exc:  # jinja errors, raise_exception() in templates
        raise ChatError(f"the chat template cannot render this conversation: {type(exc).__name__}: {exc}") from None


def render_prompt(tokenizer: Any, messages: Sequence[dict]) -> str:
    """The text the model sees before it answers (system + user, generation prompt, no thinking)."""
    return _apply(tokenizer, messages, add_generation_prompt=True)


def render_conversation(tokenizer: Any, messages: Sequence[dict]) -> str:
    return _apply(tokenizer, messages, add_generation_prompt=False)


def encode_text(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def special_ids(tokenizer: Any) -> set[int]:
    ids = set(getattr(tokenizer, "all_special_ids", []) or [])
    for token_id, added in getattr(tokenizer, "added_tokens_decoder", {}).items():
        if getattr(added, "special", False):
            ids.add(int(token_id))
    return ids


def end_of_turn_id(tokenizer: Any) -> int:
    """The token the template writes after an assistant answer (e.g. <|im_end|>, <|eot_id|>)."""
    probe = [{"role": "user", "content": "ping"}, {"role": "assistant", "content": "pong"}]
    prompt = render_prompt(tokenizer, probe[:1])
    full = render_conversation(tokenizer, probe)
    if not full.startswith(prompt):
        raise ChatError("the chat template renders the prompt differently with and without the answer")
    answer = encode_text(tokenizer, full[len(prompt):])
    specials = special_ids(tokenizer)
    for token_id in answer:
        if token_id in specials:
            return token_id
    raise ChatError("the chat template does not end an assistant turn with a special token")


def pad_token_id(tokenizer: Any) -> int:
    """The dedicated pad token; EOS or the end-of-turn token is refused."""
    pad = tokenizer.pad_token_id
    forbidden = {tokenizer.eos_token_id, end_of_turn_id(tokenizer)}
    if pad is None or pad in forbidden:
        raise ChatError(
            "the tokenizer has no dedicated pad token (pad is missing or equals EOS/end-of-turn); "
            "add a pad token to the model folder's tokenizer"
        )
    return int(pad)


def _row_parts(tokenizer: Any, row_id: str, messages: Sequence[dict], eot_id: int) -> tuple[list[int], list[int]]:
    """(prompt ids, answer ids up to and including end-of-turn) of one rendered row."""
    prompt_text = render_prompt(tokenizer, messages[:-1])
    full_text = render_conversation(tokenizer, messages)
    if not full_text.startswith(prompt_text):
        raise ChatError(f"row {row_id}: the chat template does not render the prompt as a prefix of the conversation")
    answer_ids = encode_text(tokenizer, full_text[len(prompt_text):])
    if eot_id not in answer_ids:
        raise ChatError(f"row {row_id}: the rendered answer has no end-of-turn token")
    return encode_text(tokenizer, prompt_text), answer_ids[: answer_ids.index(eot_id) + 1]  # drop what follows


def encode_row(tokenizer: Any, row_id: str, messages: Sequence[dict], max_seq_length: int, eot_id: int) -> Encoded:
    """Tokenize one [system?, user, assistant] row; supervise answer + end-of-turn only.

    A row longer than `max_seq_length` keeps its system message and answer
    whole and loses the start of its user text (tt_stagekit.promptfit); a row
    whose instruction and answer cannot fit even with an empty user message,
    or with no supervised token, is an error naming the setting.
    """
    if not messages or messages[-1].get("role") != "assistant":
        raise ChatError(f"row {row_id}: the last message must be the assistant answer")

    def count(candidate: list[dict]) -> int:
        prompt, answer = _row_parts(tokenizer, row_id, candidate, eot_id)
        return len(prompt) + len(answer)

    try:
        fitted = promptfit.fit_chat(messages, count, max_seq_length, keep_answer=True)
    except promptfit.PromptTooLong as exc:
        raise ChatError(f"row {row_id}: " + promptfit.length_message(
            "hyperparameters.max_seq_length", exc.needed, max_seq_length, "its instruction and answer")) from None
    prompt_ids, answer_ids = _row_parts(tokenizer, row_id, fitted.messages, eot_id)
    if len(answer_ids) <= 1:
        raise ChatError(f"row {row_id}: the answer has no supervised token besides end-of-turn")
    ids = prompt_ids + answer_ids
    labels = [IGNORE_INDEX] * len(prompt_ids) + answer_ids
    return Encoded(row_id=row_id, input_ids=ids, labels=labels, trimmed=fitted.trimmed)


def encode_prompt(tokenizer: Any, messages: Sequence[dict], max_prompt_tokens: int) -> tuple[list[int], bool]:
    """Tokenize an evaluation prompt of at most `max_prompt_tokens`: (ids, whether user text was trimmed)."""
    fitted = fit_prompt(tokenizer, messages, max_prompt_tokens)
    return encode_text(tokenizer, render_prompt(tokenizer, fitted.messages)), fitted.trimmed


def fit_prompt(tokenizer: Any, messages: Sequence[dict], max_prompt_tokens: int) -> promptfit.Fitted:
    """Fit a prompt (last message the user's): system messages whole, oldest turns then user text trimmed.

    Raises promptfit.PromptTooLong when even the system messages and an empty user message do not fit.
    """
    def count(candidate: list[dict]) -> int:
        return len(encode_text(tokenizer, render_prompt(tokenizer, candidate)))

    return promptfit.fit_chat(messages, count, max_prompt_tokens, keep_answer=False)
