"""Validation of `POST /v1/chat/completions` bodies into `ChatParams`, with OpenAI-style errors.

Everything a client can get wrong is checked here, before any model work, and
reported as an `ApiError` (status 4xx, `{"error": {"message", "type", "param",
"code"}}`). Parameters the server does not implement are refused by name
rather than silently ignored; a few purely informational ones (`user`,
`metadata`, `store`) are accepted and ignored.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional

from tt_stagekit.userinput import JSONInputError, loads

ROLES = ("system", "developer", "user", "assistant")
MAX_STOP = 4
MAX_STOP_CHARS = 64  # each token's check of a held-back tail costs the square of a stop sequence's length
IGNORED = {"user", "metadata", "store", "service_tier", "parallel_tool_calls"}
KNOWN = {
    "model", "messages", "stream", "stream_options", "max_tokens", "max_completion_tokens", "temperature",
    "top_p", "stop", "n", "seed", "presence_penalty", "frequency_penalty", "logprobs", "top_logprobs",
    "response_format", "tools", "tool_choice", "functions", "function_call", "logit_bias",
} | IGNORED


class ApiError(Exception):
    """A client error with its HTTP status and OpenAI error body fields."""

    def __init__(self, status: int, message: str, param: Optional[str] = None,
                 code: Optional[str] = None, type_: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.type = status, message, param, code, type_

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


@dataclass
class ChatParams:
    messages: list[dict[str, str]]
    stream: bool = False
    include_usage: bool = False
    max_tokens: Optional[int] = None
    temperature: float = 1.0
    top_p: float = 1.0
    stop: list[str] = field(default_factory=list)
    seed: Optional[int] = None
    model: str = ""  # as the request names it (a multi-adapter server resolves it: `adapters.Catalog.find`)


def _bad(message: str, param: Optional[str] = None, code: Optional[str] = None) -> ApiError:
    return ApiError(400, message, param, code)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)) and math.isfinite(value)


def _content(value: Any, param: str) -> str:
    """A message content: a string, or a list of `{"type": "text", "text": str}` parts (joined)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value:
        parts = []
        for i, part in enumerate(value):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise _bad(f"{param}[{i}] must be a text part {{\"type\": \"text\", \"text\": \"...\"}}; "
                           "this model reads text only", f"{param}[{i}]")
            parts.append(part["text"])
        return "".join(parts)
    raise _bad(f"{param} must be a string or a list of text parts", param)


def parse_messages(value: Any) -> list[dict[str, str]]:
    if value is None:
        raise _bad("'messages' is required", "messages")
    if not isinstance(value, list):
        raise _bad("'messages' must be an array of message objects", "messages")
    if not value:
        raise _bad("'messages' must contain at least one message", "messages")
    out = []
    for i, message in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise _bad(f"{where} must be an object with 'role' and 'content'", where)
        role = message.get("role")
        if not isinstance(role, str):
            raise _bad(f"{where}.role must be a string", f"{where}.role")
        if role not in ROLES:
            raise _bad(f"{where}.role {role!r} is not supported; use one of {', '.join(ROLES)}", f"{where}.role")
        for key in message:
            if key not in ("role", "content", "name"):
                raise _bad(f"{where}.{key} is not supported", f"{where}.{key}")
        if "content" not in message or message["content"] is None:
            raise _bad(f"{where}.content is required", f"{where}.content")
        out.append({"role": "system" if role == "developer" else role,
                    "content": _content(message["content"], f"{where}.content")})
    if out[-1]["role"] != "user":
        raise _bad("the last message must come from the user", f"messages[{len(out) - 1}].role")
    return out


def _stop(value: Any) -> list[str]:
    if value is None:
        return []
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise _bad("'stop' must be a string or an array of strings", "stop")
    if len(values) > MAX_STOP:
        raise _bad(f"'stop' takes at most {MAX_STOP} sequences", "stop")
    if any(v == "" for v in values):
        raise _bad("'stop' sequences must not be empty", "stop")
    if any(len(v) > MAX_STOP_CHARS for v in values):
        raise _bad(f"'stop' sequences may have at most {MAX_STOP_CHARS} characters", "stop")
    return list(values)


def _refuse_unsupported(body: dict[str, Any]) -> None:
    unknown = sorted(set(body) - KNOWN)
    if unknown:
        raise _bad(f"unrecognized request argument supplied: {', '.join(unknown)}", unknown[0])
    if body.get("n") not in (None, 1):
        raise _bad("'n' must be 1: this server returns one choice", "n")
    for key in ("tools", "functions", "logit_bias"):
        if body.get(key):
            raise _bad(f"'{key}' is not supported by this server", key)
    for key in ("tool_choice", "function_call"):
        if body.get(key) not in (None, "none"):
            raise _bad(f"'{key}' is not supported by this server", key)
    if body.get("logprobs") not in (None, False) or body.get("top_logprobs") not in (None, 0):
        raise _bad("'logprobs' is not supported by this server", "logprobs")
    fmt = body.get("response_format")
    if fmt is not None and fmt != {"type": "text"}:
        raise _bad("'response_format' supports only {\"type\": \"text\"}", "response_format")
    for key in ("presence_penalty", "frequency_penalty"):
        value = body.get(key)
        if value is None:
            continue
        if not _is_number(value) or not -2 <= value <= 2:
            raise _bad(f"'{key}' must be a number between -2 and 2", key)
        if value != 0:
            raise _bad(f"'{key}' is not supported by this server (only 0)", key)


def parse_chat(raw: bytes, model_name: Optional[str], context_length: int, temperature: float = 1.0,
               top_p: float = 1.0) -> ChatParams:
    """Parse and check a request body; raises ApiError (4xx) for anything wrong. `temperature`, `top_p`: the
    server's defaults (`tt serve --temperature/--top-p`) for a request that leaves them out. `model_name` None:
    any model name is taken here (a multi-adapter server resolves it itself)."""
    try:
        body = loads(raw)  # an integer thousands of digits long, deep nesting, a duplicated key: 400, not 500
    except JSONInputError as exc:
        raise _bad(f"the request body is not valid JSON: {exc.located()}", exc.loc or None) from None
    if not isinstance(body, dict):
        raise _bad("the request body must be a JSON object")
    _refuse_unsupported(body)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("'model' is required and must be a string", "model")
    if model_name is not None and model != model_name:
        raise ApiError(404, f"the model {model!r} does not exist; this server serves {model_name!r}",
                       "model", "model_not_found")
    params = ChatParams(messages=parse_messages(body.get("messages")), temperature=temperature, top_p=top_p,
                        model=model)

    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise _bad("'stream' must be a boolean", "stream")
    params.stream = bool(stream)
    options = body.get("stream_options")
    if options is not None:
        if not params.stream:
            raise _bad("'stream_options' is only allowed when 'stream' is true", "stream_options")
        if not isinstance(options, dict) or set(options) - {"include_usage"} or \
                not isinstance(options.get("include_usage", False), bool):
            raise _bad("'stream_options' must be {\"include_usage\": true|false}", "stream_options")
        params.include_usage = bool(options.get("include_usage", False))

    limits = [(k, body.get(k)) for k in ("max_tokens", "max_completion_tokens") if body.get(k) is not None]
    for key, value in limits:
        if not _is_int(value):
            raise _bad(f"'{key}' must be an integer", key)
        if not 1 <= value <= context_length:
            raise _bad(f"'{key}' must be between 1 and {context_length} (the model's context length); got {value}",
                       key, "integer_out_of_range")
    if len(limits) == 2 and limits[0][1] != limits[1][1]:
        raise _bad("'max_tokens' and 'max_completion_tokens' disagree; send one of them", "max_tokens")
    params.max_tokens = limits[0][1] if limits else None

    temperature = body.get("temperature")
    if temperature is not None:
        if not _is_number(temperature) or not 0 <= temperature <= 2:
            raise _bad("'temperature' must be a number between 0 and 2", "temperature")
        params.temperature = float(temperature)
    top_p = body.get("top_p")
    if top_p is not None:
        if not _is_number(top_p) or not 0 < top_p <= 1:
            raise _bad("'top_p' must be a number greater than 0 and at most 1", "top_p")
        params.top_p = float(top_p)
    params.stop = _stop(body.get("stop"))
    seed = body.get("seed")
    if seed is not None:
        if not _is_int(seed) or not -(2**63) <= seed < 2**64:
            raise _bad("'seed' must be an integer", "seed")
        params.seed = seed % (2**63)
    return params


def apply_system_message(messages: list[dict[str, str]], system_message: Optional[str]) -> list[dict[str, str]]:
    """Put the spec's system message first; a client system message must equal it (or be absent)."""
    if system_message is None:
        return messages
    for i, message in enumerate(messages):
        if message["role"] == "system" and message["content"].strip() != system_message.strip():
            raise _bad("this server applies the spec's system message; a different system message is refused "
                       "(send none, or start `tt serve` with --no-spec-prompt)", f"messages[{i}]")
    return [{"role": "system", "content": system_message}] + [m for m in messages if m["role"] != "system"]
