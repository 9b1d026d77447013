"""Request parsing for `POST /v1/chat/completions` (docs/serving.md), in process: the accepted extras
(`developer` role, `max_completion_tokens`) and the refusals of what the server does not implement, each
named by its `param` (and `code` where the docs give one)."""

from __future__ import annotations

import json

import pytest

from tt_engine_adapter.serve.request import ApiError, parse_chat

CONTEXT = 512
PROMPT = [{"role": "user", "content": "the film was great"}]


def parse(**body):
    return parse_chat(json.dumps({"model": "m", "messages": PROMPT, **body}).encode(), "m", CONTEXT)


def refused(**body) -> ApiError:
    with pytest.raises(ApiError) as caught:
        parse(**body)
    assert caught.value.status == 400 and caught.value.type == "invalid_request_error"
    return caught.value


def test_developer_role_is_a_system_message():
    params = parse(messages=[{"role": "developer", "content": "Be brief."}] + PROMPT)
    assert params.messages[0] == {"role": "system", "content": "Be brief."}


def test_max_completion_tokens_is_the_answer_budget_and_must_agree_with_max_tokens():
    assert parse(max_completion_tokens=7).max_tokens == 7
    assert parse(max_completion_tokens=7, max_tokens=7).max_tokens == 7
    assert refused(max_completion_tokens=7, max_tokens=8).param == "max_tokens"
    error = refused(max_completion_tokens=CONTEXT + 1)
    assert (error.param, error.code) == ("max_completion_tokens", "integer_out_of_range")


UNSUPPORTED = [
    ({"logprobs": True}, "logprobs"),
    ({"top_logprobs": 2}, "logprobs"),
    ({"logit_bias": {"42": 5}}, "logit_bias"),
    ({"presence_penalty": 0.5}, "presence_penalty"),
    ({"frequency_penalty": -1}, "frequency_penalty"),
    ({"frequency_penalty": 3}, "frequency_penalty"),
    ({"response_format": {"type": "json_object"}}, "response_format"),
    ({"tool_choice": "auto"}, "tool_choice"),
]


@pytest.mark.parametrize("body,param", UNSUPPORTED, ids=[p + "=" + json.dumps(b[p] if p in b else b)
                                                         for b, p in UNSUPPORTED])
def test_unsupported_parameters_are_refused_by_name(body, param):
    assert refused(**body).param == param


def test_neutral_values_of_unsupported_parameters_are_accepted():
    params = parse(logprobs=False, top_logprobs=0, presence_penalty=0, frequency_penalty=0,
                   response_format={"type": "text"}, tool_choice="none", logit_bias={})
    assert params.messages == PROMPT


def test_the_servers_sampling_defaults_apply_when_a_request_leaves_them_out():
    raw = json.dumps({"model": "m", "messages": PROMPT}).encode()
    assert (parse_chat(raw, "m", CONTEXT).temperature, parse_chat(raw, "m", CONTEXT).top_p) == (1.0, 1.0)
    defaulted = parse_chat(raw, "m", CONTEXT, temperature=0.2, top_p=0.9)  # tt serve --temperature 0.2 --top-p 0.9
    assert (defaulted.temperature, defaulted.top_p) == (0.2, 0.9)
    asked = parse_chat(json.dumps({"model": "m", "messages": PROMPT, "temperature": 0.7, "top_p": 0.5}).encode(),
                       "m", CONTEXT, temperature=0.2, top_p=0.9)
    assert (asked.temperature, asked.top_p) == (0.7, 0.5)  # the request's own values win
