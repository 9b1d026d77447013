"""Continuous batching: concurrent greedy requests answer exactly as alone, in fewer decode steps; the queue.

The session's real server subprocess (`served`: 16 sequences per batch) for
the answers and the step counts (`/metrics`); in-process, an app with one place and one queue
slot whose first decode step waits on a gate (429 and the queue in
`/metrics`), and the scheduler driven step by step for what must happen
between two decode steps (a gone client leaves; a late waiter times out).
Every wait is for a state, bounded by a deadline.
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tt_engine_adapter.testing.serving import metrics, parse_metrics, wait_for

SYSTEM = "Classify the sentiment of the movie review."
NEVER = ["\u2603"]


@pytest.fixture
def tiny(tiny_llama):
    return tiny_llama


def answer(url: str, body: dict) -> tuple:
    """(text, finish_reason, completion_tokens), streamed or not."""
    response = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120)
    assert response.status_code == 200, response.text
    if not body.get("stream"):
        reply = response.json()
        return reply["choices"][0]["message"]["content"], reply["choices"][0]["finish_reason"], \
            reply["usage"]["completion_tokens"]
    chunks = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    finish = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1]
    return text, finish, chunks[-1]["usage"]["completion_tokens"]


def test_sixteen_concurrent_greedy_requests_answer_as_alone_in_fewer_decode_steps(served):
    """The session's server (16 sequences per batch, 16 waiting); only this test's own metric deltas count."""
    bodies = [{"model": "tiny-model", "temperature": 0, "max_tokens": 6 + i, "stop": NEVER if i % 3 else None,
               "messages": [{"role": "user", "content": f"review {i}: " + "the film was great " * (i % 5)}],
               **({"stream": True, "stream_options": {"include_usage": True}} if i % 2 else {})} for i in range(16)]
    bad = [(b'{"model": "tiny-model", "messages": [', "application/json", 400),
           (json.dumps({"model": "gpt-4", "messages": [{"role": "user", "content": "x"}]}), "application/json", 404),
           (json.dumps(bodies[0]), "text/plain", 415)]
    srv = served
    before = metrics(srv.url)
    alone = [answer(srv.url, body) for body in bodies]
    middle = metrics(srv.url)

    def hostile(case):
        content, kind, status = case
        response = httpx.post(f"{srv.url}/v1/chat/completions", content=content, timeout=60,
                              headers={"Content-Type": kind})
        return response.status_code == status and "error" in response.json()

    with ThreadPoolExecutor(len(bodies) + len(bad)) as pool:
        together = list(pool.map(lambda body: answer(srv.url, body), bodies))
        refused = list(pool.map(hostile, bad))
    after = metrics(srv.url)
    assert httpx.get(f"{srv.url}/health").json() == {"status": "ok"}
    assert together == alone  # text, finish reason and token count, streamed or not
    assert all(refused)
    steps_alone = middle["tt_serve_decode_steps_total"] - before["tt_serve_decode_steps_total"]
    steps_together = after["tt_serve_decode_steps_total"] - middle["tt_serve_decode_steps_total"]
    assert steps_together < steps_alone, (steps_together, steps_alone)
    assert after["tt_serve_batch_rows_max"] > 1
    tokens = sum(a[2] for a in alone)
    assert after["tt_serve_generated_tokens_total"] - middle["tt_serve_generated_tokens_total"] == tokens


def test_full_queue_gets_429_and_metrics_show_the_queue_and_the_batch(tiny, monkeypatch):
    """One place in the batch, one in the queue (in-process app; the decode step is held on a gate so the
    state is certain): the third request gets 429 with Retry-After; /metrics shows 1 running, 1 waiting."""
    from starlette.testclient import TestClient

    from tt_engine_adapter.decode import picker
    from tt_engine_adapter.serve import generation
    from tt_engine_adapter.serve.app import create_app

    model = generation.ChatModel(str(tiny), device="cpu")
    gate, picks, real = threading.Event(), [], picker.pick

    def gated(*args):
        picks.append(1)
        if len(picks) >= 2:  # the first decode step waits until the test opens the gate
            assert gate.wait(120), "the gate was never opened"
        return real(*args)

    monkeypatch.setattr(picker, "pick", gated)
    app = create_app(model, model_name="tiny", system_message=None, api_key=None, max_concurrency=1, max_queue=1)
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "temperature": 0}
    with TestClient(app, base_url="http://127.0.0.1") as client, ThreadPoolExecutor(2) as pool:
        def scrape() -> dict[str, float]:
            return parse_metrics(client.get("/metrics").text)

        first = pool.submit(client.post, "/v1/chat/completions", json=body)
        wait_for(lambda: len(picks) >= 2, "the first request to reach its first decode step")
        second = pool.submit(client.post, "/v1/chat/completions", json=body)
        state = wait_for(lambda: (m := scrape())["tt_serve_requests_waiting"] == 1 and m, "the second to wait")
        assert state["tt_serve_requests_running"] == 1 and state["tt_serve_requests_accepted"] == 2
        full = client.post("/v1/chat/completions", json=body)
        assert full.status_code == 429 and full.headers["retry-after"] == "1", full.text
        assert full.json()["error"]["code"] == "rate_limit_exceeded"
        gate.set()
        assert first.result(120).status_code == 200 and second.result(120).status_code == 200
        assert scrape()["tt_serve_requests_refused_total"] == 1


def test_between_two_steps_a_gone_client_leaves_and_a_late_waiter_times_out(tiny):
    """The scheduler driven one iteration at a time, in-process (no thread, no timing)."""
    from tt_engine_adapter.serve.batching import DONE, Job, Scheduler
    from tt_engine_adapter.serve.generation import ChatModel, Finish
    from tt_engine_adapter.serve.request import ApiError, ChatParams

    model = ChatModel(str(tiny), device="cpu")
    scheduler = Scheduler(model, max_batch=2, max_batch_tokens=2 * model.context_length)

    def job(text: str, deadline: float = 60) -> tuple[Job, list]:
        params = ChatParams(messages=[{"role": "user", "content": text}], temperature=0, max_tokens=40, stop=NEVER)
        prompt, max_new = model.plan(params, params.messages)
        items: list = []
        return Job(params, prompt, max_new, items.append, threading.Event(), time.monotonic() + deadline), items

    (a, a_items), (b, b_items) = job("first"), job("second, longer prompt")
    scheduler.submit(a)
    scheduler.submit(b)
    scheduler._iteration()
    assert scheduler.running == 2 and scheduler._batch.keys[0].shape[0] == 2
    late, late_items = job("late", deadline=-1)
    scheduler.submit(late)
    a.cancel.set()
    steps = model.metrics.snapshot()["tt_serve_decode_steps_total"]
    scheduler._iteration()
    assert scheduler.running == 1 and scheduler._batch.keys[0].shape[0] == 1  # the step ran for b alone
    assert model.metrics.snapshot()["tt_serve_decode_steps_total"] == steps + 1
    assert a_items[-1] is DONE and not any(isinstance(i, Finish) for i in a_items)
    assert isinstance(late_items[0], ApiError) and late_items[0].status == 503 and late_items[1] is DONE
    assert late_items[0].code == "queue_timeout"
    while scheduler.running:
        scheduler._iteration()
    assert isinstance(b_items[-2], Finish) and 0 < b_items[-2].completion_tokens <= 40 and b_items[-1] is DONE
    with pytest.raises(ApiError) as big:
        Scheduler(model, max_batch=2, max_batch_tokens=30).submit(job("too big")[0])
    assert big.value.param == "max_tokens" and "--max-batch-tokens" in big.value.message
