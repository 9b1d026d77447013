"""The OpenAI-compatible HTTP app (Starlette): routes, auth, concurrency limit, errors.

Routes: `GET /health`, `GET /metrics` (Prometheus text), `GET /v1/models`,
`GET /v1/models/{id}`, `POST /v1/chat/completions` (JSON, or server-sent
events with `stream: true`).

- Browser safety (`guard`): the `Host` header must name this server, chat
  bodies must be `application/json` (415), and no CORS header is ever sent.
- Auth (`guard`, as soon as the headers arrive, before routing or any body
  is read): with an API key, every request but `/health` needs
  `Authorization: Bearer <key>` (compared in constant time) or gets 401 and
  the connection is closed. `/health` reveals nothing but readiness.
- Concurrency: at most `max_concurrency` chat requests are accepted at once;
  one more gets 429 with `Retry-After: 1` at once, before its body is read.
  Everything an accepted request costs (reading the body, parsing, the chat
  template, tokenization, generation) happens under that limit, and the CPU
  work runs in worker threads, never on the event loop.
- Errors: every 4xx/5xx is an OpenAI error body `{"error": {...}}`; an
  unexpected exception is a 500 with that body, its details go to the server
  log (never to the client), and the server keeps serving.
- A client that disconnects, streaming or not, stops its generation.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import traceback
import uuid
from typing import Any, AsyncIterator, Iterable, Optional

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from tt_engine_adapter.serve.batching import DONE, Job, Scheduler, Started
from tt_engine_adapter.serve.many import Many
from tt_engine_adapter.serve.generation import ChatModel, Delta, Finish
from tt_engine_adapter.serve.guard import HostCheck, HostPolicy, is_json, not_json
from tt_engine_adapter.serve.request import ApiError, apply_system_message, parse_chat
from tt_engine_adapter.serve.reuse import MIB
from tt_stagekit.protocol import log

MAX_BODY_BYTES = 4 * 1024 * 1024
BODY_TIMEOUT_SECONDS = 30.0
GENERIC_500 = "the server failed to answer this request; the server log has the details"


def error_response(error: ApiError, headers: Optional[dict[str, str]] = None) -> JSONResponse:
    return JSONResponse(error.body(), status_code=error.status, headers=headers)


class Slots:
    """A non-blocking counter of accepted chat requests."""

    def __init__(self, limit: int):
        self.limit, self.used = limit, 0

    def try_take(self) -> Optional["Lease"]:
        if self.used >= self.limit:
            return None
        self.used += 1
        return Lease(self)


class Lease:
    """One accepted request's slot; `release()` gives it back once, whoever calls it."""

    def __init__(self, slots: Slots):
        self._slots: Optional[Slots] = slots

    def release(self) -> None:
        if self._slots is not None:
            self._slots.used = max(0, self._slots.used - 1)
            self._slots = None


class _StreamWithSlot(StreamingResponse):
    """A streaming response that always gives its slot back and stops generation, however it ends."""

    def __init__(self, content: AsyncIterator[str], lease: Lease, cancel: threading.Event):
        super().__init__(content, media_type="text/event-stream",
                         headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        self._lease, self._cancel = lease, cancel

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._cancel.set()
            self._lease.release()

    async def listen_for_disconnect(self, receive) -> None:
        await super().listen_for_disconnect(receive)
        self._cancel.set()  # the client is gone: stop the generation and what is left of the answer at once


class LoopPost:
    """Runs callables on one event loop from the scheduler thread; equal for the same loop, so the scheduler
    wakes the loop once per delivery for all the requests it serves."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop

    def __call__(self, work: Any) -> None:
        try:
            self.loop.call_soon_threadsafe(work)
        except RuntimeError:  # the loop is closed (server shutting down)
            pass

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LoopPost) and other.loop is self.loop

    def __hash__(self) -> int:
        return id(self.loop)


def _submit(scheduler: Scheduler, params: Any, prompt: list[int], max_new: int, cancel: threading.Event,
            queue_timeout: float, lease: Lease, adapter: Any = None, shared: int = 0) -> asyncio.Queue:
    """Hand a request to the scheduler; its items arrive on the returned queue (delivered on this loop).

    The slot goes back as soon as the scheduler is done with the job (its DONE is delivered), whether or not
    the client has read the answer yet: a client that stops reading holds its connection (until the send
    timeout drops it), never a slot."""
    queue: asyncio.Queue = asyncio.Queue()

    def emit(item: Any) -> None:
        if item is DONE:
            lease.release()
        queue.put_nowait(item)

    scheduler.submit(Job(params, prompt, max_new, emit, cancel, time.monotonic() + queue_timeout,
                         LoopPost(asyncio.get_running_loop()), adapter, shared))
    return queue


MAX_BATCH_ITEMS = 16  # items handed out at once: a backlog is encoded a bounded piece per turn of the event loop


async def _batches(queue: asyncio.Queue, cancel: threading.Event) -> AsyncIterator[list[Any]]:
    """A job's Delta/Finish items until DONE, in lists of what has arrived (a consumer that is behind gets
    several at once, at most MAX_BATCH_ITEMS); an ApiError item is raised after the items before it. Leaving
    early cancels the job.

    A backlog (the whole answer of a client that stopped reading, when the send timeout drops it) goes out a
    batch per turn of the event loop, and not at all once `cancel` is set (the client is gone): encoded in one
    piece it held the loop, and every other client, for as long as 12 MB of JSON took."""
    try:
        while True:
            arrived = [await queue.get()]
            while not queue.empty() and len(arrived) < MAX_BATCH_ITEMS:
                arrived.append(queue.get_nowait())
            items = []
            for item in arrived:
                if item is DONE:
                    if items:
                        yield items
                    return
                if isinstance(item, ApiError):
                    if items:
                        yield items
                    raise item
                items.append(item)
            yield items
            if not queue.empty():
                await asyncio.sleep(0)  # let the loop run other clients (and the disconnect) between batches
            if cancel.is_set():
                return
    finally:
        cancel.set()


async def _watch_disconnect(request: Request, cancel: threading.Event) -> None:
    """Set `cancel` when the client goes away (the body has been read: the next message is the disconnect)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            cancel.set()
            return


def create_app(model: ChatModel, *, model_name: str, system_message: Optional[str], api_key: Optional[str],
               max_concurrency: int, max_queue: int = 0, queue_timeout: float = 60.0,
               max_batch_tokens: Optional[int] = None, bound_host: str = "127.0.0.1",
               allowed_hosts: Iterable[str] = (), body_timeout: float = BODY_TIMEOUT_SECONDS,
               sampling: tuple[float, float] = (1.0, 1.0), many: Optional[Many] = None,
               prefix_cache_mb: int = 0) -> HostCheck:
    """The app; `max_concurrency` sequences decode together, `max_queue` more requests wait (then 429);
    `sampling`: the (temperature, top_p) of a request that does not say; `many`: the adapters of a
    multi-adapter server (`model_name` and `system_message` are then each adapter's own); `prefix_cache_mb`:
    the bound of the prompt starts kept across requests (`reuse`; 0: off)."""
    slots = Slots(max_concurrency + max_queue)
    metrics = model.metrics
    scheduler = Scheduler(model, max_concurrency, max_batch_tokens or max_concurrency * model.context_length,
                          many.residency if many else None, prefix_cache_mb * MIB)
    log(scheduler.reuse.note)
    scheduler.start()
    created = int(time.time())

    def model_card() -> dict[str, Any]:
        return {"id": model_name, "object": "model", "created": created, "owned_by": "tt"}

    def cards() -> list[dict[str, Any]]:
        return [model_card()] if many is None else many.cards(created)

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok", **(many.health() if many else {})})

    async def show_metrics(request: Request) -> Response:
        metrics.set("tt_serve_requests_accepted", slots.used)
        running = scheduler.running
        metrics.set("tt_serve_requests_running", running)
        metrics.set("tt_serve_requests_waiting", max(0, slots.used - running))
        return PlainTextResponse(metrics.render(), media_type="text/plain; version=0.0.4")

    async def list_models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": cards()})

    async def get_model(request: Request) -> Response:
        if many is not None:
            card = next((c for c in cards() if c["id"] == request.path_params["model_id"]), None)
            if card is not None:
                return JSONResponse(card)
        if request.path_params["model_id"] != model_name or many is not None:
            return error_response(ApiError(404, f"the model {request.path_params['model_id']!r} does not exist",
                                           "model", "model_not_found"))
        return JSONResponse(model_card())

    async def read_body(request: Request) -> bytes:
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
            raise ApiError(413, f"the request body is larger than {MAX_BODY_BYTES} bytes")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise ApiError(413, f"the request body is larger than {MAX_BODY_BYTES} bytes")
            chunks.append(chunk)
        return b"".join(chunks)

    def prepare(raw: bytes) -> tuple[Any, list[int], int, Any, int]:
        """Parse, pick the adapter, apply its system message, render and tokenize (a worker thread: CPU work off
        the loop)."""
        params = parse_chat(raw, None if many else model_name, model.context_length, *sampling)
        adapter = many.catalog.find(params.model) if many else None  # resolved once: the whole answer is its
        messages = apply_system_message(params.messages, adapter.spec.system_message if adapter else system_message)
        prompt, max_new = model.plan(params, messages)
        return params, prompt, max_new, adapter, model.shared_start(messages, prompt)

    async def chat_completions(request: Request) -> Response:
        if not is_json(request.headers.get("content-type")):
            return error_response(not_json())
        lease = slots.try_take()
        if lease is None:
            metrics.add("tt_serve_requests_refused_total")
            return error_response(ApiError(429, f"the server is full ({max_concurrency} requests generating, "
                                                f"{max_queue} waiting: --max-queue); retry shortly", None,
                                           "rate_limit_exceeded", "rate_limit_error"), headers={"Retry-After": "1"})
        try:
            try:
                raw = await asyncio.wait_for(read_body(request), body_timeout)
            except asyncio.TimeoutError:
                raise ApiError(408, f"the request body did not arrive within {body_timeout:g} s", None,
                               "request_timeout") from None
            params, prompt, max_new, adapter, shared = await run_in_threadpool(prepare, raw)
        except ApiError as exc:
            lease.release()
            return error_response(exc)
        except BaseException:
            lease.release()
            raise
        cancel = threading.Event()
        watcher = asyncio.create_task(_watch_disconnect(request, cancel))
        streaming = False
        try:
            queue = _submit(scheduler, params, prompt, max_new, cancel, queue_timeout, lease, adapter, shared)
            answered_as = adapter.reference if adapter else model_name
            items = _batches(queue, cancel)
            first = await queue.get()  # Started, or an error / DONE while waiting (timeout, client gone)
            if first is not DONE and not isinstance(first, Started):
                raise first if isinstance(first, ApiError) else ApiError(500, GENERIC_500)
            if first is DONE:  # the client went away while waiting; nobody reads this
                return error_response(ApiError(400, "the client closed the connection", None, "client_closed"))
            completion_id, stamp = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
            if params.stream:
                watcher.cancel()  # the streaming response listens for the disconnect itself
                streaming = True
                return _StreamWithSlot(_sse(items, completion_id, stamp, answered_as, params.include_usage), lease,
                                       cancel)
            text, finish = [], None
            async for batch in items:
                for item in batch:
                    if isinstance(item, Delta):
                        text.append(item.text)
                    else:
                        finish = item
        except ApiError as exc:
            return error_response(exc, headers={"Retry-After": "1"} if exc.code == "queue_timeout" else None)
        finally:
            watcher.cancel()
            if not streaming:
                cancel.set()
                lease.release()
        if finish is None:  # the client went away; nobody reads this
            return error_response(ApiError(400, "the client closed the connection", None, "client_closed"))
        return JSONResponse({
            "id": completion_id, "object": "chat.completion", "created": stamp, "model": answered_as,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "".join(text)},
                         "logprobs": None, "finish_reason": finish.reason}],
            "usage": _usage(finish),
        })

    async def http_error(request: Request, exc: HTTPException) -> Response:
        codes = {404: "not_found", 405: "method_not_allowed"}
        message = {404: f"no route {request.url.path}", 405: f"{request.method} is not allowed on {request.url.path}"}
        return error_response(ApiError(exc.status_code, message.get(exc.status_code, "the request was refused"),
                                       None, codes.get(exc.status_code)))

    async def server_error(request: Request, exc: Exception) -> Response:
        traceback.print_exception(exc)
        return error_response(ApiError(500, GENERIC_500, None, "internal_error", "server_error"))

    routes = [
        Route("/health", health, methods=["GET"]),
        Route("/metrics", show_metrics, methods=["GET"]),
        Route("/v1/models", list_models, methods=["GET"]),
        Route("/v1/models/{model_id:path}", get_model, methods=["GET"]),
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
    ]
    if many is not None:
        routes.append(Route("/admin/adapters", many.admin_route(read_body, body_timeout), methods=["POST"]))
    app = Starlette(routes=routes, exception_handlers={HTTPException: http_error, Exception: server_error})
    return HostCheck(app, HostPolicy(bound_host, allowed_hosts), api_key)


def _usage(finish: Finish) -> dict[str, int]:
    return {"prompt_tokens": finish.prompt_tokens, "completion_tokens": finish.completion_tokens,
            "total_tokens": finish.prompt_tokens + finish.completion_tokens}


async def _sse(batches: AsyncIterator[list[Any]], completion_id: str, stamp: int, model_name: str,
               include_usage: bool) -> AsyncIterator[str]:
    """OpenAI chunk events: a role chunk, content chunks, a finish chunk, optional usage, [DONE].

    The events of the items that arrived together go out in one write (one chunk per delta still)."""

    def chunk(delta: dict[str, Any], finish_reason: Optional[str] = None, **extra: Any) -> str:
        body = {"id": completion_id, "object": "chat.completion.chunk", "created": stamp, "model": model_name,
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}], **extra}
        return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"

    yield chunk({"role": "assistant", "content": ""})
    finished = False
    try:
        async for batch in batches:
            events = []
            for item in batch:
                if isinstance(item, Delta):
                    events.append(chunk({"content": item.text}))
                else:
                    events.append(chunk({}, item.reason))
                    if include_usage:
                        body = {"id": completion_id, "object": "chat.completion.chunk", "created": stamp,
                                "model": model_name, "choices": [], "usage": _usage(item)}
                        events.append(f"data: {json.dumps(body)}\n\n")
                    events.append("data: [DONE]\n\n")  # nothing follows a finish
                    finished = True
            yield "".join(events)
    except ApiError as exc:  # headers are sent already: report in-band, as OpenAI does
        yield f"data: {json.dumps(exc.body())}\n\n"
    if not finished:
        yield "data: [DONE]\n\n"
