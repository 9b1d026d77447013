"""`tt serve`'s engine side: the real server process, the official `openai` client, raw HTTP for bad requests.

The session's tiny Llama-style model (built locally, no hub) and, for the tests
that only send requests, the session's server (conftest `served`); every
server is a real subprocess on an ephemeral loopback port.
"""

from __future__ import annotations

import json

import httpx
import pytest

from tt_engine_adapter.testing import serving

SYSTEM = "Classify the sentiment of the movie review."
PROMPT = [{"role": "user", "content": "the film was great"}]
KEY = "s3cret-key-for-tests"  # the server refuses keys under 16 characters


@pytest.fixture
def server(served):
    return served


@pytest.fixture
def tiny(tiny_llama):
    return tiny_llama


def chat(url: str, body, **kwargs) -> httpx.Response:
    content = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return httpx.post(f"{url}/v1/chat/completions", content=content, timeout=60,
                      headers={"Content-Type": "application/json", **kwargs.pop("headers", {})}, **kwargs)


def metrics(url: str, headers: dict) -> dict[str, float]:
    """`/metrics` of a server that needs its API key there too."""
    return serving.parse_metrics(httpx.get(f"{url}/metrics", headers=headers, timeout=30).text)


def test_openai_client_chat_and_stream_agree(server):
    from openai import OpenAI

    client = OpenAI(base_url=f"{server.url}/v1", api_key="not-needed-on-loopback", max_retries=0)
    assert [m.id for m in client.models.list().data] == ["tiny-model"]
    for stop in (None, ["e"]):
        full = client.chat.completions.create(model="tiny-model", messages=PROMPT, temperature=0, max_tokens=24,
                                              stop=stop)
        text = full.choices[0].message.content
        assert full.choices[0].finish_reason in ("stop", "length")
        assert full.usage.prompt_tokens > 0 and full.usage.total_tokens == full.usage.prompt_tokens + \
            full.usage.completion_tokens
        if stop:
            assert "e" not in text
        chunks = list(client.chat.completions.create(model="tiny-model", messages=PROMPT, temperature=0,
                                                     max_tokens=24, stop=stop, stream=True,
                                                     stream_options={"include_usage": True}))
        joined = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert joined == text
        assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == full.choices[0].finish_reason
        assert chunks[-1].usage.completion_tokens == full.usage.completion_tokens
    # the spec's system message, sent again verbatim by the client, is accepted and changes nothing
    again = client.chat.completions.create(model="tiny-model", temperature=0, max_tokens=24,
                                           messages=[{"role": "system", "content": SYSTEM}] + PROMPT)
    first = client.chat.completions.create(model="tiny-model", messages=PROMPT, temperature=0, max_tokens=24)
    assert again.choices[0].message.content == first.choices[0].message.content
    # seeded sampling is reproducible; top_p accepted
    a, b = (client.chat.completions.create(model="tiny-model", messages=PROMPT, temperature=1.0, top_p=0.9, seed=7,
                                           max_tokens=12).choices[0].message.content for _ in range(2))
    assert a == b


def test_server_matches_tt_evaluation_greedy(server, tiny):
    """At temperature 0 the server answers exactly what the evaluation stages predict."""
    from tt_engine_adapter.runtime.generate import generate
    from tt_engine_adapter.runtime.model_source import load_model, load_tokenizer

    import torch

    tokenizer, model = load_tokenizer(str(tiny)), load_model(str(tiny), "cpu", torch.float32)
    prompts = [{"id": "a", "messages": [{"role": "system", "content": SYSTEM}] + PROMPT}]
    expected = generate(model, tokenizer, prompts, max_new_tokens=16, batch_size=1, max_seq_length=512,
                        device="cpu")[0]["prediction"]
    got = chat(server.url, {"model": "tiny-model", "messages": PROMPT, "temperature": 0, "max_tokens": 16}).json()
    assert got["choices"][0]["message"]["content"] == expected


BAD_REQUESTS = [
    ("malformed JSON", b'{"model": "tiny-model", "messages": [', 400, None),
    ("not an object", b"[1, 2]", 400, None),
    ("missing messages", {"model": "tiny-model"}, 400, "messages"),
    ("empty messages", {"model": "tiny-model", "messages": []}, 400, "messages"),
    ("messages not a list", {"model": "tiny-model", "messages": "hi"}, 400, "messages"),
    ("message not an object", {"model": "tiny-model", "messages": ["hi"]}, 400, "messages[0]"),
    ("content wrong type", {"model": "tiny-model", "messages": [{"role": "user", "content": 5}]}, 400,
     "messages[0].content"),
    ("content missing", {"model": "tiny-model", "messages": [{"role": "user"}]}, 400, "messages[0].content"),
    ("unknown role", {"model": "tiny-model", "messages": [{"role": "wizard", "content": "hi"}]}, 400,
     "messages[0].role"),
    ("role wrong type", {"model": "tiny-model", "messages": [{"role": 1, "content": "hi"}]}, 400, "messages[0].role"),
    ("ends with assistant", {"model": "tiny-model", "messages": PROMPT + [{"role": "assistant", "content": "x"}]},
     400, "messages[1].role"),
    ("other system message", {"model": "tiny-model", "messages": [{"role": "system", "content": "Be rude."}] + PROMPT},
     400, "messages[0]"),
    ("max_tokens zero", {"model": "tiny-model", "messages": PROMPT, "max_tokens": 0}, 400, "max_tokens"),
    ("max_tokens negative", {"model": "tiny-model", "messages": PROMPT, "max_tokens": -3}, 400, "max_tokens"),
    ("max_tokens huge", {"model": "tiny-model", "messages": PROMPT, "max_tokens": 10**9}, 400, "max_tokens"),
    ("max_tokens string", {"model": "tiny-model", "messages": PROMPT, "max_tokens": "5"}, 400, "max_tokens"),
    ("max_tokens float", {"model": "tiny-model", "messages": PROMPT, "max_tokens": 2.5}, 400, "max_tokens"),
    ("prompt + max_tokens over context", {"model": "tiny-model", "messages": PROMPT, "max_tokens": 510}, 400,
     "max_tokens"),
    ("temperature wrong type", {"model": "tiny-model", "messages": PROMPT, "temperature": "hot"}, 400, "temperature"),
    ("temperature out of range", {"model": "tiny-model", "messages": PROMPT, "temperature": 9}, 400, "temperature"),
    ("top_p zero", {"model": "tiny-model", "messages": PROMPT, "top_p": 0}, 400, "top_p"),
    ("stop wrong type", {"model": "tiny-model", "messages": PROMPT, "stop": 3}, 400, "stop"),
    ("too many stops", {"model": "tiny-model", "messages": PROMPT, "stop": list("abcde")}, 400, "stop"),
    ("stream wrong type", {"model": "tiny-model", "messages": PROMPT, "stream": "yes"}, 400, "stream"),
    ("n > 1", {"model": "tiny-model", "messages": PROMPT, "n": 2}, 400, "n"),
    ("tools", {"model": "tiny-model", "messages": PROMPT, "tools": [{"type": "function"}]}, 400, "tools"),
    ("unknown argument", {"model": "tiny-model", "messages": PROMPT, "temprature": 0}, 400, "temprature"),
    ("missing model", {"messages": PROMPT}, 400, "model"),
    ("unknown model", {"model": "gpt-4", "messages": PROMPT}, 404, "model"),
]


@pytest.mark.parametrize("name,body,status,param", BAD_REQUESTS, ids=[b[0] for b in BAD_REQUESTS])
def test_bad_request_gets_openai_error_and_server_keeps_answering(server, name, body, status, param):
    response = chat(server.url, body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["message"] and error["type"] == "invalid_request_error"
    assert error["param"] == param
    ok = chat(server.url, {"model": "tiny-model", "messages": PROMPT, "max_tokens": 2, "temperature": 0})
    assert ok.status_code == 200 and httpx.get(f"{server.url}/health").json() == {"status": "ok"}


def test_long_prompts_are_fitted_instruction_first_or_refused_with_400(server, tiny):
    """A prompt longer than the context loses user text only; one whose system message cannot fit gets 400."""
    long = chat(server.url, {"model": "tiny-model", "messages": [{"role": "user", "content": "great " * 600}],
                             "temperature": 0})
    assert long.status_code == 200, long.text
    usage = long.json()["usage"]
    assert usage["prompt_tokens"] <= 512 - 128  # the answer reserve (a quarter of the 512-token context)
    assert usage["prompt_tokens"] + usage["completion_tokens"] <= 512

    refused = chat(server.url, {"model": "tiny-model", "messages": PROMPT, "max_tokens": 505})
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["code"] == "context_length_exceeded" and error["param"] == "max_tokens"
    assert "system message" in error["message"] and "512" in error["message"]

    # the serving path itself: oldest whole turns go first, the system message and the last question stay whole
    from tt_engine_adapter.serve.generation import ChatModel
    from tt_engine_adapter.serve.request import ChatParams

    model = ChatModel(str(tiny), device="cpu")
    system = {"role": "system", "content": SYSTEM}
    turns = []
    for k in range(6):
        turns += [{"role": "user", "content": f"review number {k}: " + "the film was great " * 12},
                  {"role": "assistant", "content": "positive"}]
    last = {"role": "user", "content": "the plot was dull"}
    ids, max_new = model.plan(ChatParams(messages=[], max_tokens=200), [system] + turns + [last])
    kept = next(k for k in range(0, len(turns) + 1, 2)
                if model.prompt_ids([system] + turns[k:] + [last]) == ids)
    assert 0 < kept < len(turns) and len(ids) <= 512 - 200 and max_new == 200
    assert len(model.prompt_ids([system] + turns[kept - 2:] + [last])) > 512 - 200  # no more turns dropped than needed
    only_last = model.plan(ChatParams(messages=[], max_tokens=200),
                           [system, {"role": "user", "content": "the film was great " * 100 + "the end"}])[0]
    text = model.tokenizer.decode(only_last)
    assert SYSTEM in text and "great the end" in text and len(only_last) <= 312


def test_unknown_route_method_and_oversized_body(server):
    assert httpx.get(f"{server.url}/v1/nothing").status_code == 404
    response = httpx.get(f"{server.url}/v1/chat/completions")
    assert response.status_code == 405 and "error" in response.json()
    big = chat(server.url, b"{" + b" " * (5 * 1024 * 1024) + b"}")
    assert big.status_code == 413 and "error" in big.json()


def test_api_key_concurrency_limit_and_clean_shutdown(tiny, tmp_path):
    """One slot, no queue, a key. The scheduler is held at the stream's first token (the test gate), so "a
    generation is running" is certain: the next request gets 429; the client leaving stops the generation."""
    srv = serving.start(tmp_path, tiny, model_name="tiny-model", api_key=KEY, max_concurrency=1,
                        max_queue=0, gate=True)
    try:
        good = {"Authorization": f"Bearer {KEY}"}
        assert httpx.get(f"{srv.url}/v1/models").status_code == 401
        assert httpx.get(f"{srv.url}/v1/models", headers={"Authorization": "Bearer nope"}).status_code == 401
        denied = chat(srv.url, {"model": "tiny-model", "messages": PROMPT})
        assert denied.status_code == 401 and denied.json()["error"]["code"] == "invalid_api_key"
        assert httpx.get(f"{srv.url}/v1/models", headers=good).json()["data"][0]["id"] == "tiny-model"

        from openai import OpenAI

        client = OpenAI(base_url=f"{srv.url}/v1", api_key=KEY, max_retries=0)
        assert client.chat.completions.create(model="tiny-model", messages=PROMPT, max_tokens=3).choices
        # no spec prompt on this server (--no-spec-prompt): the client's own system message and turns are used
        own = [{"role": "system", "content": "Be rude."}, {"role": "user", "content": "hi"},
               {"role": "assistant", "content": "no"}, {"role": "user", "content": [{"type": "text", "text": "why"}]}]
        assert client.chat.completions.create(model="tiny-model", messages=own, max_tokens=3).usage.prompt_tokens > 20
        # a system message that leaves no room for the answer reserve cannot be trimmed: 400, never cut
        huge = chat(srv.url, {"model": "tiny-model", "messages": [{"role": "system", "content": "be rude " * 200},
                                                                  {"role": "user", "content": "hi"}]}, headers=good)
        assert huge.status_code == 400 and huge.json()["error"]["code"] == "context_length_exceeded"
        assert huge.json()["error"]["param"] == "messages"

        # One stream holds the only slot, its generation held at its first token: the next request gets 429.
        body = {"model": "tiny-model", "messages": PROMPT, "stream": True, "max_tokens": 400, "temperature": 0,
                "stop": ["\u2603"]}
        before = metrics(srv.url, good)
        srv.gate.close()
        with httpx.Client(timeout=60) as http:
            with http.stream("POST", f"{srv.url}/v1/chat/completions", json=body, headers=good) as stream:
                lines = stream.iter_lines()
                assert next(lines).startswith("data: ")
                srv.gate.held()
                busy = chat(srv.url, {"model": "tiny-model", "messages": PROMPT, "max_tokens": 2}, headers=good)
                assert busy.status_code == 429, busy.text
                assert busy.json()["error"]["type"] == "rate_limit_error" and busy.headers["retry-after"] == "1"
                assert metrics(srv.url, good)["tt_serve_requests_accepted"] == 1
                # the client goes away mid-stream: generation must stop (counted) and the slot come back
        srv.gate.held(gone=1)  # the server saw the client leave before the generation may go on
        srv.gate.open()
        after = serving.wait_for(lambda: (m := metrics(srv.url, good))["tt_serve_requests_accepted"] == 0 and m,
                                 "the slot to free")
        assert after["tt_serve_requests_cancelled_total"] == before["tt_serve_requests_cancelled_total"] + 1
        assert after["tt_serve_requests_refused_total"] == before["tt_serve_requests_refused_total"] + 1
        # the full answer is 400 tokens (no stop, greedy): the held token and at most the step under way when the
        # gate opened were generated, then cancellation ended it
        assert after["tt_serve_generated_tokens_total"] - before["tt_serve_generated_tokens_total"] <= 2, after
        again = chat(srv.url, {"model": "tiny-model", "messages": PROMPT, "max_tokens": 2}, headers=good)
        assert again.status_code == 200, again.text
    finally:
        code = srv.stop()
    assert code == 130, srv.log.read_text()


def test_non_loopback_bind_without_key_is_refused(tiny, tmp_path):
    with pytest.raises(serving.StartFailed) as failed:
        serving.start(tmp_path, tiny, host="0.0.0.0")
    assert failed.value.code == 2 and "API key" in failed.value.output


def test_adapter_served_on_its_base(tiny, tmp_path):
    """Base + PEFT adapter (unmerged) answers like the candidate evaluation, stream and not."""
    import torch
    from peft import LoraConfig, PeftModel, get_peft_model

    from tt_engine_adapter.runtime.generate import generate
    from tt_engine_adapter.runtime.model_source import load_model, load_tokenizer

    torch.manual_seed(0)
    base = load_model(str(tiny), "cpu", torch.float32)
    peft = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                           init_lora_weights=False))
    peft.save_pretrained(str(tmp_path / "adapter"))
    tokenizer = load_tokenizer(str(tiny))
    model = PeftModel.from_pretrained(load_model(str(tiny), "cpu", torch.float32), str(tmp_path / "adapter"))
    prompts = [{"id": "a", "messages": [{"role": "system", "content": SYSTEM}] + PROMPT}]
    expected = generate(model, tokenizer, prompts, max_new_tokens=16, batch_size=1, max_seq_length=512,
                        device="cpu")[0]["prediction"]
    with serving.start(tmp_path / "srv", tiny, adapter_path=tmp_path / "adapter", model_name="tuned",
                       system_message=SYSTEM) as srv:
        body = {"model": "tuned", "messages": PROMPT, "temperature": 0, "max_tokens": 16}
        got = chat(srv.url, body).json()["choices"][0]["message"]["content"]
        streamed = chat(srv.url, {**body, "stream": True}).text
    assert got == expected
    pieces = [json.loads(line[6:]) for line in streamed.splitlines() if line.startswith("data: {")]
    assert "".join(p["choices"][0]["delta"].get("content", "") for p in pieces) == expected
    assert streamed.rstrip().endswith("data: [DONE]")
