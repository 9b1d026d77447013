"""The server against the browser, the slow client and the careless one (hardening: Host, JSON, limits, errors).

One real server subprocess (one slot, `tt.example` allowed, a default answer
budget of 5 tokens, a 1 s header timeout) plus in-process apps where the test
needs to look inside (which thread tokenizes; what a failing generation says).
Every wait is for a state (a metric, a closed socket), bounded by a deadline.
"""

from __future__ import annotations

import json
import socket

import httpx
import pytest

from tt_engine_adapter.testing import serving
from tt_engine_adapter.testing.serving import metrics, wait_for

SYSTEM = "Classify the sentiment of the movie review."
PROMPT = [{"role": "user", "content": "the film was great"}]
NEVER = ["\u2603"]  # a stop sequence the tiny model never writes


@pytest.fixture(scope="module")
def server(tiny_llama, tmp_path_factory):
    with serving.start(tmp_path_factory.mktemp("harden-srv"), tiny_llama, model_name="tiny-model",
                       system_message=SYSTEM, max_concurrency=1, max_queue=0, allowed_hosts=["tt.example"],
                       default_max_tokens=5, header_timeout=1.0, gate=True) as srv:
        yield srv


def chat(url: str, body, headers=None, **kwargs) -> httpx.Response:
    content = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return httpx.post(f"{url}/v1/chat/completions", content=content, timeout=60,
                      headers={"Content-Type": "application/json", **(headers or {})}, **kwargs)


def test_host_header_must_name_this_server(server):
    port = server.url.rsplit(":", 1)[1]
    for host in ("evil.example", f"evil.example:{port}", "127.0.0.1.nip.io", "localhost.evil.example", "tt.example:x"):
        for response in (httpx.get(f"{server.url}/health", headers={"Host": host}),
                         chat(server.url, {"model": "tiny-model", "messages": PROMPT, "max_tokens": 1},
                              headers={"Host": host})):
            assert response.status_code == 400, (host, response.text)
            assert response.json()["error"]["code"] == "invalid_host"
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost", "tt.example", f"TT.Example:{port}"):
        assert httpx.get(f"{server.url}/health", headers={"Host": host}).status_code == 200, host
    ok = chat(server.url, {"model": "tiny-model", "messages": PROMPT, "max_tokens": 1}, headers={"Host": "tt.example"})
    assert ok.status_code == 200, ok.text


def test_chat_needs_json_and_no_cors_header_is_sent(server):
    body = json.dumps({"model": "tiny-model", "messages": PROMPT, "max_tokens": 1})
    for kind in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None):
        headers = {"Content-Type": kind} if kind else {}
        response = httpx.post(f"{server.url}/v1/chat/completions", content=body.encode(), headers=headers, timeout=60)
        assert response.status_code == 415, (kind, response.text)
        assert response.json()["error"]["code"] == "unsupported_media_type"
    ok = chat(server.url, body, headers={"Content-Type": "application/json; charset=utf-8",
                                         "Origin": "http://evil.example"})
    assert ok.status_code == 200, ok.text
    preflight = httpx.options(f"{server.url}/v1/chat/completions", headers={
        "Origin": "http://evil.example", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type"})
    for response in (ok, preflight):
        assert not [h for h in response.headers if h.lower().startswith("access-control-")], response.headers


def test_default_max_tokens_bounds_an_answer_without_max_tokens(server):
    body = {"model": "tiny-model", "messages": PROMPT, "temperature": 0, "stop": NEVER}
    longer = chat(server.url, {**body, "max_tokens": 12}).json()
    assert longer["usage"]["completion_tokens"] > 5  # this prompt goes on when allowed to
    short = chat(server.url, body).json()
    assert short["usage"]["completion_tokens"] == 5 and short["choices"][0]["finish_reason"] == "length"


def _raw_post(url: str, body: dict) -> socket.socket:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    data = json.dumps(body).encode()
    sock = socket.create_connection((host, int(port)), timeout=30)
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: " + host.encode() + b"\r\n"
                 b"Content-Type: application/json\r\nContent-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)
    return sock


def test_work_is_under_the_limit_and_a_gone_client_stops_its_generation(server):
    """While the only slot generates, even a malformed body gets 429 (nothing parsed outside the limit);
    a non-streaming client that disconnects stops its generation (counted) and frees the slot. The scheduler
    is held at the first token (the test gate): the generation is certainly running while the test acts."""
    body = {"model": "tiny-model", "messages": PROMPT, "temperature": 0, "stop": NEVER, "max_tokens": 400}
    before = metrics(server.url)
    server.gate.close()
    sock = _raw_post(server.url, body)
    try:
        server.gate.held()
        busy = chat(server.url, b'{"model": "tiny-model", "messages": [')
        assert busy.status_code == 429, busy.text
    finally:
        sock.close()
    server.gate.held(gone=1)  # the server saw the client leave before the generation may go on
    server.gate.open()
    after = wait_for(lambda: (m := metrics(server.url))["tt_serve_requests_accepted"] == 0 and m, "the slot to free")
    assert after["tt_serve_requests_cancelled_total"] == before["tt_serve_requests_cancelled_total"] + 1
    # 400 greedy tokens with a stop sequence it never writes: only the held token and at most the step under way
    # when the gate opened were generated
    assert after["tt_serve_generated_tokens_total"] - before["tt_serve_generated_tokens_total"] <= 2, after
    assert chat(server.url, {**body, "max_tokens": 2}).status_code == 200


def test_slow_headers_are_cut_off(server):
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    for partial in (b"", b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n"):
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(partial)
            assert sock.recv(1024) == b"", partial  # closed by the server after 1 s, never answered
    with httpx.Client(timeout=30) as client:  # a kept-alive connection still serves request after request
        assert [client.get(f"{server.url}/health").status_code for _ in range(3)] == [200, 200, 200]


@pytest.fixture(scope="module")
def loaded(tiny_llama):
    from tt_engine_adapter.serve.generation import ChatModel

    return ChatModel(str(tiny_llama), device="cpu")


def _in_process(model, **kwargs):
    from starlette.testclient import TestClient

    from tt_engine_adapter.serve.app import create_app

    app = create_app(model, model_name="tiny-model", system_message=SYSTEM, api_key=None, max_concurrency=2, **kwargs)
    return TestClient(app, base_url="http://127.0.0.1", raise_server_exceptions=False)


def test_parsing_template_and_tokenization_run_off_the_event_loop(loaded, monkeypatch):
    import asyncio

    from tt_engine_adapter.serve import generation

    seen = []

    def loop_running() -> bool:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return False
        return True

    real = generation.ChatModel.prompt_ids
    monkeypatch.setattr(generation.ChatModel, "prompt_ids", lambda self, m: seen.append(loop_running()) or real(self, m))
    with _in_process(loaded) as client:
        response = client.post("/v1/chat/completions", json={"model": "tiny-model", "messages": PROMPT,
                                                             "max_tokens": 2})
    assert response.status_code == 200, response.text
    assert seen and not any(seen), "the chat template / tokenizer ran on the event loop"


def test_error_bodies_hold_no_exception_text_or_paths(loaded, monkeypatch, capfd):
    from tt_engine_adapter.decode import picker
    from tt_engine_adapter.serve import generation

    def broken(*args, **kwargs):
        raise OSError("/secret/weights/model.safetensors: disk on fire")

    monkeypatch.setattr(picker, "pick", broken)
    body = {"model": "tiny-model", "messages": PROMPT, "max_tokens": 2}
    with _in_process(loaded) as client:
        plain = client.post("/v1/chat/completions", json=body)
        streamed = client.post("/v1/chat/completions", json={**body, "stream": True})
        monkeypatch.setattr(generation.ChatModel, "plan", lambda *a: (_ for _ in ()).throw(RuntimeError("/secret/x")))
        planned = client.post("/v1/chat/completions", json=body)
    assert plain.status_code == 500 and plain.json()["error"]["code"] == "generation_failed"
    assert planned.status_code == 500 and planned.json()["error"]["type"] == "server_error"
    for text in (plain.text, streamed.text, planned.text):
        assert "secret" not in text and "fire" not in text and "OSError" not in text and "RuntimeError" not in text
    assert '"error"' in streamed.text
    logged = capfd.readouterr().err
    assert "disk on fire" in logged and "/secret/x" in logged  # the details go to the server log
