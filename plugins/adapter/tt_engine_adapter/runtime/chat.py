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
from typing import Any, Optional, Sequence

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


def _call(tokenizer: Any, messages: Sequence[dict], add_generation_prompt: bool) -> str:
    return tokenizer.apply_chat_template(
        list(messages), tokenize=False, add_generation_prompt=add_generation_prompt, enable_thinking=False
    )


def fold_system(messages: Sequence[dict]) -> Optional[list[dict]]:
    """The chat with its leading system message put at the start of the first user message (a blank line
    between), for templates without a system role (Gemma 1-2, Mistral 7B v0.1); None when there is none to fold."""
    if len(messages) < 2 or messages[0]["role"] != "system" or messages[1]["role"] != "user":
        return None
    first = {**messages[1], "content": f"{messages[0]['content']}\n\n{messages[1]['content']}"}
    return [first] + list(messages[2:])


def _apply(tokenizer: Any, messages: Sequence[dict], add_generation_prompt: bool) -> str:
    if not getattr(tokenizer, "chat_template", None):
        raise ChatError("the tokenizer has no chat template; a chat model folder must ship one")
    try:
        return _call(tokenizer, messages, add_generation_prompt)
    except Exception as exc:  # jinja errors, raise_exception() in templates
        error = exc
    folded = fold_system(messages)
    if folded is not None:  # a template without a system role: the same text every time for the same chat
        try:
            return _call(tokenizer, folded, add_generation_prompt)
        except Exception:
            pass
    raise ChatError(f"the chat template cannot render this conversation: {type(error).__name__}: {error}") from None


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


@dataclass(frozen=True)
class Padding:
    """The id that fills padding positions, and why that one. Padding is masked by POSITION (the collator's
    attention mask and labels), never by token id, so the fill id may equal EOS or the end-of-turn token and
    those tokens keep their labels where the row really has them."""

    id: int
    token: str
    source: str  # "pad token" | "pad token = EOS" | "pad token = end-of-turn" | "EOS" | "end-of-turn"

    @property
    def dedicated(self) -> bool:
        return self.source == "pad token"

    def record(self) -> dict[str, Any]:
        return {"id": self.id, "token": self.token, "source": self.source, "masked_by": "position"}

    def note(self) -> str:
        """One line for the report when the fill id is not a dedicated pad token."""
        what = {"EOS": "no pad token", "end-of-turn": "no pad token and no EOS"}.get(self.source, self.source)
        return (f"the tokenizer has no dedicated pad token ({what}): padding is filled with {self.token!r} and "
                "masked by position (attention mask and labels), so that token keeps its label where a row has it")


def padding(tokenizer: Any) -> Padding:
    """The fill id for padding, as the model ships: its own pad token when it has one (even when it equals
    EOS or the end-of-turn token), else EOS, else the end-of-turn token. The tokenizer is never edited and
    the embeddings never resized."""
    eot = end_of_turn_id(tokenizer)
    pad, eos = tokenizer.pad_token_id, tokenizer.eos_token_id
    if pad is not None:
        source = "pad token = EOS" if pad == eos else "pad token = end-of-turn" if pad == eot else "pad token"
        chosen = int(pad)
    elif eos is not None:
        source, chosen = "EOS", int(eos)
    else:
        source, chosen = "end-of-turn", eot
    return Padding(id=chosen, token=tokenizer.convert_ids_to_tokens(chosen), source=source)


def pad_token_id(tokenizer: Any) -> int:
    """The id that fills padding positions (`padding(tokenizer).id`); it is never used to find padding."""
    return padding(tokenizer).id


def stop_ids(tokenizer: Any) -> list[int]:
    """Every id that ends an answer: the end-of-turn token, the tokenizer's EOS and each EOS id of the model
    folder's generation_config.json (Llama 3.1 lists three; generation stops on any of them)."""
    ids: list[int] = []
    try:
        ids.append(end_of_turn_id(tokenizer))
    except ChatError:
        pass
    if tokenizer.eos_token_id is not None:
        ids.append(int(tokenizer.eos_token_id))
    ids += _generation_config_eos(getattr(tokenizer, "name_or_path", "") or "")
    if not ids:
        raise ChatError("the tokenizer has neither an end-of-turn token nor EOS; generation could never stop")
    return list(dict.fromkeys(ids))


def _generation_config_eos(folder: str) -> list[int]:
    import json
    from pathlib import Path

    path = Path(folder) / "generation_config.json"
    try:
        value = json.loads(path.read_text(encoding="utf-8")).get("eos_token_id")
    except (OSError, ValueError, AttributeError):
        return []
    values = value if isinstance(value, list) else [value]
    return [int(v) for v in values if isinstance(v, int) and not isinstance(v, bool)]


TURNS = ("all", "last")


def _segments(tokenizer: Any, row_id: str, messages: Sequence[dict], eot_id: int,
              turns: str) -> list[tuple[str, bool]]:
    """The rendered row cut into (text, supervised) pieces: every assistant turn (or the last only) is
    supervised from its first character up to and including its end-of-turn token; text the template
    writes after the last answer's end-of-turn is dropped.

    An answer starts where the generation prompt of the turns before it ends when that prompt is a prefix
    of the whole rendering (the evaluation-time prompt, always the case for the last turn of the usual
    templates); otherwise (templates that render earlier turns differently, e.g. Qwen3 drops their
    thinking block) at its own content.
    """
    full = render_conversation(tokenizer, messages)
    eot_text = tokenizer.convert_ids_to_tokens(eot_id)
    answers = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    if turns == "last":
        answers = answers[-1:]
    pieces: list[tuple[str, bool]] = []
    cursor = 0
    for index in answers:
        prompt = render_prompt(tokenizer, messages[:index])
        content = messages[index]["content"].strip()
        if len(prompt) >= cursor and full.startswith(prompt):
            start = len(prompt)
        else:
            start = full.find(content, cursor)
            if start < 0:
                raise ChatError(f"row {row_id}: the chat template does not render messages[{index}] (an assistant "
                                "turn) verbatim, so its tokens cannot be found")
        end = full.find(eot_text, start)
        if end < 0 or content not in full[start:end]:
            raise ChatError(f"row {row_id}: the rendered answer of messages[{index}] has no end-of-turn token")
        end += len(eot_text)
        pieces += [(full[cursor:start], False), (full[start:end], True)]
        cursor = end
    if answers and answers[-1] != len(messages) - 1:
        pieces.append((full[cursor:], False))
    return [(text, sup) for text, sup in pieces if text]


def _encode_pieces(tokenizer: Any, row_id: str, pieces: list[tuple[str, bool]], eot_id: int) -> tuple[list[int], list[int]]:
    ids: list[int] = []
    labels: list[int] = []
    for text, supervised in pieces:
        piece = encode_text(tokenizer, text)
        if supervised and (len(piece) <= 1 or piece[-1] != eot_id):
            raise ChatError(f"row {row_id}: an answer has no supervised token besides end-of-turn")
        ids += piece
        labels += piece if supervised else [IGNORE_INDEX] * len(piece)
    return ids, labels


def encode_row(tokenizer: Any, row_id: str, messages: Sequence[dict], max_seq_length: int, eot_id: int,
               turns: str = "all") -> Encoded:
    """Tokenize one chat row ([system?, user, assistant, ...], ending with an assistant answer).

    Loss on every assistant turn's tokens plus its end-of-turn (`turns="all"`) or on the last answer only
    (`"last"`); everything else is label -100. A row longer than `max_seq_length` keeps its system
    messages and last answer whole and loses its oldest turns, then the start of its last user text
    (tt_stagekit.promptfit); a row whose instruction and answer cannot fit even with an empty user
    message, or with no supervised token, is an error naming the setting.
    """
    if not messages or messages[-1].get("role") != "assistant":
        raise ChatError(f"row {row_id}: the last message must be the assistant answer")

    def count(candidate: list[dict]) -> int:
        return sum(len(encode_text(tokenizer, text)) for text, _ in _segments(tokenizer, row_id, candidate, eot_id, turns))

    try:
        fitted = promptfit.fit_chat(messages, count, max_seq_length, keep_answer=True)
    except promptfit.PromptTooLong as exc:
        raise ChatError(f"row {row_id}: " + promptfit.length_message(
            "hyperparameters.max_seq_length", exc.needed, max_seq_length, "its instruction and answer")) from None
    except ValueError as exc:  # e.g. a tool turn right before the answer: no user text to trim
        raise ChatError(f"row {row_id}: longer than hyperparameters.max_seq_length ({max_seq_length}) and cannot be "
                        f"trimmed ({exc}); raise hyperparameters.max_seq_length or shorten the row") from None
    ids, labels = _encode_pieces(tokenizer, row_id, _segments(tokenizer, row_id, fitted.messages, eot_id, turns), eot_id)
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
