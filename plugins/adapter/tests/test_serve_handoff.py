"""The hand-off from the scheduler thread to the HTTP side, and streaming when deltas arrive together.

In-process, no timing: the scheduler delivers an iteration's items with one
`post` per consumer (not one per item and row), and each job still gets
exactly the items, in order, that it gets with direct delivery; a streaming
consumer that is behind gets several items at once and writes them in one
piece, yet every delta is its own chunk, in order, the joined text is the
answer, and the stream ends with one finish chunk, the usage chunk and one
`[DONE]`; an error after some deltas is reported in-band after them.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest

from tt_engine_adapter.serve.app import _batches, _sse
from tt_engine_adapter.serve.batching import DONE, Job, Scheduler
from tt_engine_adapter.serve.generation import ChatModel, Delta, Finish
from tt_engine_adapter.serve.request import ApiError, ChatParams

NEVER = ["\u2603"]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from tt_engine_adapter.testing.tiny_model import build

    return ChatModel(str(build(tmp_path_factory.mktemp("handoff-model") / "tiny", arch="llama", hidden=64,
                               layers=2)), device="cpu")


class CountingPost:
    """A consumer's `post` that only records: the test delivers later, as a busy event loop would."""

    def __init__(self):
        self.calls: list = []

    def __call__(self, work) -> None:
        self.calls.append(work)


def _jobs(model: ChatModel, post=None) -> list[tuple[Job, list]]:
    out = []
    for i, budget in enumerate([12, 1, 9, 16, 5]):
        params = ChatParams(messages=[{"role": "user", "content": f"review {i}: " + "great " * i}], temperature=0,
                            max_tokens=budget, stop=NEVER)
        prompt, max_new = model.plan(params, params.messages)
        items: list = []
        extra = (post,) if post is not None else ()
        out.append((Job(params, prompt, max_new, items.append, threading.Event(), time.monotonic() + 600, *extra),
                    items))
    return out


def _run(model: ChatModel, jobs: list[tuple[Job, list]], post: CountingPost | None = None) -> list[int]:
    """Drive the scheduler to the end; the posts made by each iteration (delivered after it)."""
    scheduler = Scheduler(model, max_batch=len(jobs), max_batch_tokens=len(jobs) * model.context_length)
    for job, _ in jobs:
        scheduler.submit(job)
    posts = []
    while True:
        scheduler._iteration()
        if post is not None:
            posts.append(len(post.calls))
            for work in post.calls:
                work()
            post.calls.clear()
        if not scheduler.running:
            return posts


def test_one_post_per_delivery_for_all_rows_and_the_same_items_in_order(model):
    direct = _jobs(model)
    _run(model, direct)
    post = CountingPost()
    batched = _jobs(model, post)
    posts = _run(model, batched, post)

    assert [_shown(items) for _, items in batched] == [_shown(items) for _, items in direct]
    assert all(items[-1] is DONE for _, items in batched)
    assert posts[0] == 2  # Started before the prefill pass, then the first tokens
    assert all(n <= 1 for n in posts[1:]) and 1 in posts[1:]  # a decode step: at most one wake-up for all rows
    assert sum(posts) < sum(len(items) for _, items in batched) / 3


def _shown(items: list) -> list:
    """A job's items, comparable across runs (a `Started` or `DONE` is the same whatever object it is)."""
    return [type(item).__name__ if item is DONE or type(item).__name__ == "Started" else item for item in items]


def _events(stream: list[str]) -> list:
    """The `data:` payloads of an SSE stream, decoded ([DONE] as the string)."""
    payloads = [part[len("data: "):] for part in "".join(stream).split("\n\n") if part]
    return [p if p == "[DONE]" else json.loads(p) for p in payloads]


def _stream(arrivals: list[list]) -> list[str]:
    """Run `_sse` over a queue fed in groups: each group arrives at once while the consumer waits."""

    async def main() -> list[str]:
        queue: asyncio.Queue = asyncio.Queue()
        cancel = threading.Event()
        sse = _sse(_batches(queue, cancel), "chatcmpl-x", 1, "tiny", True)
        writes = [await sse.__anext__()]  # the role chunk
        for group in arrivals:
            for item in group:
                queue.put_nowait(item)
            writes.append(await sse.__anext__())
        writes += [w async for w in sse]
        assert cancel.is_set()
        return writes

    return asyncio.run(main())


def test_a_streaming_consumer_that_is_behind_writes_each_arrival_once_with_every_delta_in_order(model):
    (job, items), = _jobs(model)[3:4]
    _run(model, [(job, items)])
    deltas = [item.text for item in items if isinstance(item, Delta)]
    finish = next(item for item in items if isinstance(item, Finish))
    answer = "".join(deltas)
    assert len(deltas) >= 3 and answer
    body = [item for item in items if isinstance(item, (Delta, Finish))] + [DONE]
    arrivals = [body[:1], body[1:3], body[3:]]  # one delta, then two together, then the rest with the finish
    writes = _stream(arrivals)

    assert len(writes) == 1 + len(arrivals)  # one write per arrival, [DONE] in the last
    events = _events(writes)
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    contents = [e["choices"][0]["delta"]["content"] for e in events[1:] if isinstance(e, dict) and e["choices"]
                and "content" in e["choices"][0]["delta"]]
    assert contents == deltas and "".join(contents) == answer
    assert events[-3]["choices"][0]["finish_reason"] == finish.reason
    assert events[-2]["usage"]["completion_tokens"] == finish.completion_tokens
    assert events[-1] == "[DONE]" and events.count("[DONE]") == 1


def test_an_error_after_some_deltas_is_reported_after_them():
    error = ApiError(500, "the server failed", None, "generation_failed", "server_error")
    events = _events(_stream([[Delta("a"), Delta("b"), error, DONE]]))
    assert [e["choices"][0]["delta"]["content"] for e in events[1:3]] == ["a", "b"]
    assert events[3]["error"]["code"] == "generation_failed" and events[4] == "[DONE]" and len(events) == 5


def test_a_long_backlog_goes_out_in_bounded_batches_the_loop_running_between_and_stops_once_cancelled():
    """A stream whose client stopped reading holds its whole answer in the queue; when the client is dropped the
    backlog must not be encoded in one piece on the event loop (a 12 MB join blocked every other client): it goes
    out at most MAX_BATCH_ITEMS items at a time, other callbacks run between two batches, and once `cancel` is
    set (the client is gone) nothing more is yielded."""
    from tt_engine_adapter.serve.app import MAX_BATCH_ITEMS

    async def main() -> tuple[list[int], list[int], bool]:
        queue: asyncio.Queue = asyncio.Queue()
        cancel = threading.Event()
        for i in range(5 * MAX_BATCH_ITEMS):
            queue.put_nowait(Delta(f"t{i} "))
        queue.put_nowait(DONE)
        ticks: list[int] = []
        loop = asyncio.get_running_loop()

        def tick() -> None:  # another client's work, queued on the loop
            ticks.append(len(sizes))
            if len(ticks) < 10:
                loop.call_soon(tick)

        sizes: list[int] = []
        batches = _batches(queue, cancel)
        loop.call_soon(tick)
        sizes.append(len(await batches.__anext__()))
        sizes.append(len(await batches.__anext__()))
        cancel.set()  # the client is gone
        rest = [batch async for batch in batches]
        return sizes, ticks, rest == []

    sizes, ticks, stopped = asyncio.run(main())
    assert sizes == [MAX_BATCH_ITEMS, MAX_BATCH_ITEMS]
    assert 1 in ticks  # the loop ran another callback between the first batch and the second
    assert stopped  # the rest of the backlog was never handed out
