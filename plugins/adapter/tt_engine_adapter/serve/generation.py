"""The served model: loading and prompt rendering.

One code path serves both streamed and non-streamed requests: the scheduler
(`batching`) sends `Delta(text)` pieces and one final `Finish` per request.
Joined deltas are exactly the non-streamed text, because both come from the
same `TextTracker` (`detokenize`):

- prompts are rendered with the model's own chat template (`runtime.chat`,
  the path training and evaluation use), tokenized without extra specials,
  and fitted instruction first into the context minus the answer budget
  (oldest turns, then the start of the last user message; `plan`);
- each step is a forward pass over the new token with the KV cache; greedy at
  temperature 0 (one argmax for all the batch's rows), else seeded sampling
  with temperature and top-p (`decode.picker`, GRPO's rollouts' too);
- generation ends at the end-of-turn token or EOS (finish_reason "stop"), at a
  client stop sequence ("stop"), or after max_tokens ("length");
- the answer is decoded incrementally with special tokens skipped and
  surrounding whitespace stripped (as the evaluation stages do); text that
  might still change (an incomplete UTF-8 character, trailing whitespace,
  the start of a stop sequence) is held back until it is certain.

The model is used by the scheduler thread only (`batching`).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Optional

from tt_engine_adapter.runtime import chat
from tt_stagekit import promptfit
from tt_stagekit.devices import pick_device
from tt_engine_adapter.serve.metrics import Metrics
from tt_engine_adapter.serve.request import ApiError, ChatParams


ANSWER_RESERVE = 256  # at most; a quarter of the context on small models
STARTS_KEPT = 64  # distinct system prompts whose template start is remembered (`shared_start`)


@dataclass
class Delta:
    text: str


@dataclass
class Finish:
    reason: str  # "stop" | "length"
    prompt_tokens: int
    completion_tokens: int


class BadSetting(ValueError):
    """A server setting that does not fit the loaded model (exit 2)."""


class ChatModel:
    """A causal LM (optionally with a PEFT adapter) and its tokenizer, ready to answer chats."""

    def __init__(self, model_path: str, adapter_path: Optional[str] = None, device: str = "auto",
                 default_max_tokens: Optional[int] = None):
        import torch

        from tt_engine_adapter.runtime import model_source

        model_source.go_offline()
        self.torch = torch
        self.device = pick_device(device)
        dtype = model_source.pick_dtype(self.device, "auto")
        self.tokenizer = model_source.load_tokenizer(model_path)
        model = model_source.load_model(model_path, self.device, dtype)
        if adapter_path:
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, adapter_path, is_trainable=False)
        model.eval()
        self.model = model
        self.stop_ids = set(chat.stop_ids(self.tokenizer))
        config = model.config
        self.context_length = int(getattr(config, "max_position_embeddings", 0) or self.tokenizer.model_max_length)
        self.metrics = Metrics()
        if default_max_tokens is not None and not 1 <= default_max_tokens < self.context_length:
            raise BadSetting(f"--default-max-tokens {default_max_tokens} must be less than this model's context "
                             f"of {self.context_length} tokens (the prompt needs room too)")
        self.default_max_tokens = default_max_tokens or self.answer_reserve()
        self._starts: dict[tuple, list[int]] = {}
        chat.render_prompt(self.tokenizer, [{"role": "user", "content": "ping"}])  # fail now, not per request

    def prompt_ids(self, messages: list[dict[str, str]]) -> list[int]:
        try:
            text = chat.render_prompt(self.tokenizer, messages)
        except chat.ChatError as exc:  # the template's own text goes to the log, not to the client
            print(f"chat template refused a request: {exc}", file=sys.stderr, flush=True)
            raise ApiError(400, "the model's chat template cannot render these messages (most templates need "
                           "user and assistant turns to alternate)", "messages") from None
        return chat.encode_text(self.tokenizer, text)

    def shared_start(self, messages: list[dict[str, str]], prompt: list[int]) -> int:
        """How many leading ids of `prompt` (the ids of `messages`) every request with the same leading system
        messages starts with: the ids of the chat template rendered with those messages and any user text (two
        renderings, with different user texts, agree on them), at most all but the prompt's last id. The server's
        prefix cache keeps their keys and values (`reuse`)."""
        system = []
        for message in messages:
            if message.get("role") != "system":
                break
            system.append(message)
        key = tuple((m["role"], m["content"]) for m in system)
        start = self._starts.get(key)
        if start is None:
            try:
                one, two = (self.prompt_ids(system + [{"role": "user", "content": text}]) for text in ("a", "b"))
            except ApiError:  # this template renders no user turn after these messages: nothing to share
                one, two = [], []
            start = one[:_common(one, two)]
            if len(self._starts) >= STARTS_KEPT:
                self._starts.clear()
            self._starts[key] = start
        return min(_common(start, prompt), len(prompt) - 1)

    def answer_reserve(self) -> int:
        """The default answer budget without --default-max-tokens: a quarter of the context, at most 256."""
        return max(1, min(ANSWER_RESERVE, self.context_length // 4))

    def plan(self, params: ChatParams, messages: list[dict[str, str]]) -> tuple[list[int], int]:
        """(prompt ids, max new tokens), fitting the prompt instruction first, or ApiError when it cannot fit.

        The answer budget is max_tokens, else the server's default
        (`--default-max-tokens`, else `answer_reserve()`); a longer prompt loses
        its oldest whole turns, then the start of the last user message (system
        messages are never cut). The answer never exceeds the budget.
        """
        budget = params.max_tokens if params.max_tokens is not None else self.default_max_tokens
        limit = self.context_length - budget
        measured: list[tuple[list, list[int]]] = []  # each candidate measured, so the fitted one is not rendered again

        def count(candidate: list) -> int:
            measured.append((candidate, self.prompt_ids(candidate)))
            return len(measured[-1][1])

        try:
            fitted = promptfit.fit_chat(messages, count, limit, keep_answer=False)
        except promptfit.PromptTooLong as exc:
            what = f"max_tokens ({budget})" if params.max_tokens is not None else f"the default max_tokens ({budget})"
            raise ApiError(400, f"the system message with an empty user message is {exc.needed} tokens; with "
                           f"{what} that exceeds this model's context of {self.context_length} tokens "
                           f"(needs {exc.needed + budget}); only user text is trimmed to fit",
                           "max_tokens" if params.max_tokens is not None else "messages",
                           "context_length_exceeded") from None
        ids = next((ids for candidate, ids in measured if candidate is fitted.messages), None)
        return (ids if ids is not None else self.prompt_ids(fitted.messages)), budget


def _common(a: list[int], b: list[int]) -> int:
    """Leading ids `a` and `b` share."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def set_threads() -> None:
    """Torch's CPU threads for the model: `TT_NUM_THREADS` when set, else one fewer than the CPU cores this
    process may use (at least one): the event loop, the request workers and clients on the same machine
    need a core, and torch's threads spin-wait for work, so a thread per core makes them wait for each
    other. Only lowers torch's own default."""
    import torch

    value = os.environ.get("TT_NUM_THREADS")
    if value and value.isdigit() and int(value) > 0:
        torch.set_num_threads(int(value))
        return
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    torch.set_num_threads(max(1, min(torch.get_num_threads(), cores - 1)))
