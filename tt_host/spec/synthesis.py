"""The spec's `synthesis` block: grow the training examples with a teacher model (docs/synthesis.md).

Engine-neutral and host-side: the teacher is reached over HTTP (the OpenAI chat-completions API), so the
torch-free host runs it. The teacher is a registered tt model (`{"model_id": ...}`, served by `tt serve`,
at `base_url`, loopback port 8000 by default) or any OpenAI-compatible endpoint (`{"base_url", "model"}`).
A spec is data someone else may have written: it names where the teacher is, never which of the user's
secrets is sent. The key comes from the user's side (`TT_TEACHER_API_KEY`, sent only to the origin
`TT_TEACHER_ORIGIN` approves: tt_host.synthesis.teacher); the old `api_key_env` field is refused, naming
what to set instead.
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from typing import Any, Optional
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from tt_host.spec.strict import StrictModel, Text

DEFAULT_TT_SERVE_URL = "http://127.0.0.1:8000/v1"  # `tt serve MODEL`'s default address
HOST_NAME = re.compile(r"^[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,62})(?:\.[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,62}))*\.?$")
KEY_MOVED = ("no longer accepted: a spec cannot choose which of your secrets is sent. Remove it, and set the key "
             "on your side: export TT_TEACHER_API_KEY=<key> and TT_TEACHER_ORIGIN=<scheme://host:port of base_url> "
             "(docs/synthesis.md)")


def _http_url(value: str) -> str:
    """An http(s) URL tt can reach: a host name or IP, a numeric port, no credentials, query or odd characters."""
    if any(char.isspace() or unicodedata.category(char) in ("Cc", "Cf") for char in value):
        raise ValueError("holds a space or an invisible/control character; write the URL without it")
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"{value!r} is not an http:// or https:// URL (e.g. http://127.0.0.1:8000/v1)")
    if parts.username or parts.password or "@" in parts.netloc:
        raise ValueError("a URL must not carry credentials; set the key in TT_TEACHER_API_KEY (docs/synthesis.md)")
    if parts.query or parts.fragment:
        raise ValueError("the base URL takes no query or fragment (tt appends /chat/completions)")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"{value!r}: the port must be a number from 1 to 65535") from None
    if port == 0:
        raise ValueError(f"{value!r}: the port must be a number from 1 to 65535")
    host = parts.hostname or ""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        if not HOST_NAME.match(host):
            raise ValueError(f"{value!r}: {host!r} is not a host name or IP address") from None
    return value.rstrip("/")


def _no_invisible(value: Optional[str]) -> Optional[str]:
    """Refuse control and format characters (escape sequences, bidi overrides): the name is printed."""
    for index, char in enumerate(value or ""):
        if unicodedata.category(char) in ("Cc", "Cf"):
            raise ValueError(f"holds the control or invisible character U+{ord(char):04X} at position {index}; "
                             "it would act on a terminal or hide what is shown: remove it")
    return value


class Teacher(StrictModel):
    """Who answers: `model_id` (a registered tt model served by `tt serve`) or `base_url` + `model`."""

    model_id: Optional[Text] = Field(None, min_length=1, max_length=200,
                                    description="A model `tt models list` shows, served by `tt serve`.")
    base_url: Optional[Text] = Field(None, min_length=1, max_length=2000,
                                    description="The OpenAI-compatible API root, e.g. http://127.0.0.1:8000/v1.")
    model: Optional[Text] = Field(None, min_length=1, max_length=200, description="The model name the endpoint knows.")
    api_key_env: Any = Field(None, exclude=True, description="Refused: the key comes from TT_TEACHER_API_KEY, "
                             "sent only to TT_TEACHER_ORIGIN (docs/synthesis.md).")

    @field_validator("base_url")
    @classmethod
    def _url(cls, value: Optional[str]) -> Optional[str]:
        return _http_url(value) if value is not None else None

    @field_validator("model", "model_id")
    @classmethod
    def _shown(cls, value: Optional[str]) -> Optional[str]:
        return _no_invisible(value)

    @field_validator("api_key_env", mode="before")
    @classmethod
    def _key_moved(cls, value: Any) -> None:
        if value is not None:
            raise ValueError(KEY_MOVED)
        return None

    @model_validator(mode="after")
    def _one_kind(self) -> "Teacher":
        if self.model_id is not None and self.model is not None:
            raise ValueError("give either model_id (a registered tt model) or model (an endpoint's model name), "
                             "not both")
        if self.model_id is None and (self.base_url is None or self.model is None):
            raise ValueError("give model_id (a registered tt model served by `tt serve`) or both base_url and model "
                             "(an OpenAI-compatible endpoint)")
        return self

    @property
    def url(self) -> str:
        """The API root requests go to."""
        return self.base_url or DEFAULT_TT_SERVE_URL

    @property
    def model_name(self) -> str:
        """The `model` field of every request."""
        return self.model if self.model is not None else str(self.model_id)


class Checks(StrictModel):
    """What every teacher answer must pass to become a row; a failing answer is dropped, by reason."""

    valid_json: bool = Field(False, description="The answer parses as JSON.")
    regex: Optional[str] = Field(None, min_length=1, max_length=2000,
                                 description="The whole answer matches this Python regular expression.")
    max_chars: Optional[int] = Field(None, ge=1, le=1_000_000, description="The answer is at most this long.")
    json_fields: list[str] = Field(default_factory=list, description="The answer is a JSON object with these "
                                   "top-level fields.")

    @field_validator("regex")
    @classmethod
    def _compiles(cls, value: Optional[str]) -> Optional[str]:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a valid regular expression: {exc}") from None
            from tt_host.spec.regexcheck import pathological

            if problem := pathological(value):
                raise ValueError(problem)
        return value

    @field_validator("json_fields")
    @classmethod
    def _fields(cls, value: list[str]) -> list[str]:
        for index, name in enumerate(value):
            if not name:
                raise ValueError(f"item {index} is empty")
        if len(set(value)) != len(value):
            raise ValueError("a field is listed twice")
        return value


class Synthesis(StrictModel):
    """How many rows to grow, from which teacher, how fast, and what they must pass."""

    teacher: Teacher
    rows: int = Field(ge=1, le=100_000, description="How many synthetic rows to keep.")
    seed: int = Field(0, ge=0, le=2**31 - 1, description="Seeds the sample of training examples each request shows "
                      "and the teacher's own `seed`.")
    weight: float = Field(1.0, gt=0, le=16, description="How much the synthetic rows count in training next to the "
                          "spec's examples: each kept row is trained on `weight` times (a seeded share of them for "
                          "the fraction).")
    inputs_per_request: int = Field(8, ge=1, le=100, description="New inputs asked for in one request.")
    examples_per_request: int = Field(4, ge=1, le=50, description="Training examples each request shows the teacher.")
    temperature: float = Field(1.0, ge=0, le=2, description="Sampling temperature when asking for new inputs.")
    answer_temperature: float = Field(0.0, ge=0, le=2, description="Sampling temperature of the answers.")
    max_tokens: int = Field(512, ge=1, le=32_768, description="Most tokens one teacher reply may use.")
    max_requests: Optional[int] = Field(None, ge=1, le=10_000_000, description="Budget: most requests the stage "
                                        "sends (cached answers are free); default 4 × rows + 20.")
    concurrency: int = Field(4, ge=1, le=256, description="Requests in flight at once.")
    requests_per_minute: Optional[float] = Field(None, gt=0, le=1_000_000, description="Most requests started per "
                                                 "minute (none: no limit).")
    timeout_seconds: float = Field(120.0, gt=0, le=3600, description="How long one request may take.")
    max_retries: int = Field(5, ge=0, le=50, description="Retries of a request that got 429, a 5xx, a timeout or no "
                             "connection (with backoff, honouring Retry-After).")
    checks: Checks = Field(default_factory=Checks)

    @property
    def request_budget(self) -> int:
        return self.max_requests if self.max_requests is not None else 4 * self.rows + 20

    def content_settings(self) -> dict:
        """The settings that decide which rows come out (the stage fingerprint's inputs): not the speed knobs
        (concurrency, rate, timeout, retries), which change how fast, never what."""
        return self.model_dump(mode="json", exclude={"concurrency", "requests_per_minute", "timeout_seconds",
                                                      "max_retries"})
