"""Continuous batching: one thread owns the model and decodes every running sequence in one forward pass per step.

Requests become `Job`s (prompt ids, answer budget, sampling settings, a cancel
flag, an `emit` and the `post` that runs it on the consumer's side). The scheduler thread loops:

1. drops jobs whose client went away (running or waiting) and answers waiting
   jobs that outlived `--queue-timeout` (503, `Retry-After`);
2. admits waiting jobs, first come first served, while the batch has fewer
   than `max_batch` rows and `rows x longest reservation` (prompt + answer
   budget, the padded KV cache it can grow to) stays within
   `max_batch_tokens`; the jobs admitted together are prefilled in one
   forward pass (left-padded; prompts of very different lengths go in
   separate passes, so padding never exceeds the real tokens: `decode.groups`),
   and their caches join the batch (`decode.kvcache`); with the prefix cache
   on (`reuse`), a prompt whose start (system prompt, chat template) is kept
   for its adapter prefills only the rest, over the kept keys and values;
3. runs one decode step for all rows: the per-layer caches are left-padded to
   a common length, the padding masked out and each row given its own
   positions, so a row computes what it would alone (`decode.forward`); the
   rows pick their next tokens (`decode.picker`: greedy ones by one argmax,
   others by their own seeded sampler), and rows that finish leave.

With one row there is no padding at all. `max_batch` 1 is one request at a
time (batching off). Each job's items are `Started`, `Delta`s, one `Finish`
or an `ApiError`, then `DONE`.

Hand-off: the items of an iteration are collected and delivered together, one
`post` per consumer (the HTTP event loop) rather than one per item and row,
so a decode step of 8 rows wakes the event loop once, not 8 times; `Started`
is delivered before the prefill pass, everything else at the end of the
iteration that produced it, in order.
"""

from __future__ import annotations

import contextlib
import secrets
import threading
import time
import traceback
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from tt_engine_adapter.decode import picker
from tt_engine_adapter.decode.forward import Forward
from tt_engine_adapter.decode.groups import prefill_groups
from tt_engine_adapter.decode.kvcache import BatchCache
from tt_engine_adapter.serve.detokenize import TextTracker
from tt_engine_adapter.serve.generation import ChatModel, Delta, Finish
from tt_engine_adapter.serve.request import ApiError, ChatParams
from tt_engine_adapter.serve.reuse import PromptReuse

DONE = object()


class Started:
    """The job entered the running batch (sent before its first token)."""


def _call_now(work: Callable[[], None]) -> None:
    work()


@dataclass
class Job:
    params: ChatParams
    prompt: list[int]
    max_new: int
    emit: Callable[[Any], None]  # called with each item, through `post`
    cancel: threading.Event
    deadline: float  # time.monotonic() by which it must have started
    post: Callable[[Callable[[], None]], None] = _call_now  # runs a callable on the consumer's side, thread-safe;
    # jobs whose `post`s are equal get one call per delivery for all their items
    adapter: Optional[Any] = None  # a multi-adapter server's adapters.Entry: the LoRA this row runs with
    shared: int = 0  # leading prompt ids every request to its model starts with (`ChatModel.shared_start`)

    @property
    def reserve(self) -> int:
        return len(self.prompt) + self.max_new


@dataclass
class _Row:
    job: Job
    tracker: TextTracker
    generator: Optional[Any]
    next_token: int = -1
    produced: int = 0
    done: bool = False
    reason: str = "length"
    extra: dict = field(default_factory=dict)


class Scheduler:
    """The running batch and the queue in front of it; `submit` from any thread, `start` once."""

    def __init__(self, model: ChatModel, max_batch: int, max_batch_tokens: int, residency: Optional[Any] = None,
                 prefix_cache_bytes: int = 0):
        self.model, self.torch, self.metrics = model, model.torch, model.metrics
        self.max_batch, self.max_batch_tokens = max_batch, max_batch_tokens
        self.residency = residency  # adapters.Residency of a multi-adapter server: rows name their adapters
        self._forward = Forward(self.torch, model.model, model.device)
        self.reuse = PromptReuse(self._forward, self.metrics, prefix_cache_bytes)  # kept prompt starts (off at 0)
        pad = model.tokenizer.pad_token_id
        self._pad_id = int(pad) if pad is not None else min(model.stop_ids)  # masked out: any id will do
        self._pending: deque[Job] = deque()
        self._cond = threading.Condition()
        self._rows: list[_Row] = []
        self._batch = BatchCache()
        self._outbox: list[tuple[Job, Any]] = []
        self._thread = threading.Thread(target=self._loop, name="tt-batch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def running(self) -> int:
        return len(self._rows)

    def submit(self, job: Job) -> None:
        if job.reserve > self.max_batch_tokens:
            raise ApiError(400, f"this request may need {job.reserve} tokens of context (prompt "
                                f"{len(job.prompt)} + max_tokens {job.max_new}), more than the server's "
                                f"--max-batch-tokens {self.max_batch_tokens}; send a smaller max_tokens",
                           "max_tokens", "context_length_exceeded")
        with self._cond:
            self._pending.append(job)
            self._cond.notify()

    # -- the scheduler thread --------------------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            try:
                self._iteration()
            except Exception:  # never lose the scheduler thread; the rows' own failures are handled in _guarded
                traceback.print_exc()
                time.sleep(0.1)

    def _iteration(self) -> None:
        with self._cond:
            while not self._pending and not self._rows:
                self._cond.wait()
            admitted = self._admit()
        try:
            self._drop_cancelled()
            if self.residency is not None:
                admitted = self._load_adapters(admitted)
            for group in prefill_groups(admitted):
                self._guarded(group, lambda: self._prefill(group))
            if self._rows:
                self._guarded([r.job for r in self._rows], self._decode)
            self._retire()
            self.metrics.set("tt_serve_requests_running", len(self._rows))
        finally:
            self._flush()

    def _send(self, job: Job, item: Any) -> None:
        self._outbox.append((job, item))

    def _flush(self) -> None:
        """Deliver the collected items: one `post` per consumer, each job's items in order."""
        if not self._outbox:
            return
        by_post: dict[Any, list[tuple[Job, Any]]] = {}
        for job, item in self._outbox:
            by_post.setdefault(job.post, []).append((job, item))
        self._outbox = []
        for post, items in by_post.items():
            post(lambda items=items: _deliver(items))

    def _admit(self) -> list[Job]:
        now, kept, admitted = time.monotonic(), deque(), []
        longest = max((r.job.reserve for r in self._rows), default=0)
        in_use = {r.job.adapter.uid for r in self._rows if r.job.adapter is not None}
        while self._pending:
            job = self._pending.popleft()
            if job.cancel.is_set():
                self.metrics.add("tt_serve_requests_cancelled_total")
                self._send(job, DONE)
                continue
            rows = len(self._rows) + len(admitted) + 1
            fits = not kept and rows <= self.max_batch and rows * max(longest, job.reserve) <= self.max_batch_tokens
            if fits and job.adapter is not None and self.residency is not None:
                fits = self.residency.fits(in_use, job.adapter)  # --max-adapters: wait for a resident place
            if fits:
                admitted.append(job)
                longest = max(longest, job.reserve)
                if job.adapter is not None:
                    in_use.add(job.adapter.uid)
            elif now > job.deadline:
                self._send(job, ApiError(503, "the request waited longer than the server's --queue-timeout for a "
                                              "place in the running batch; retry shortly", None, "queue_timeout",
                                         "server_error"))
                self._send(job, DONE)
            else:
                kept.append(job)  # first come first served: nothing overtakes a waiting job
        self._pending = kept
        return admitted

    def _guarded(self, jobs: list[Job], work: Callable[[], None]) -> None:
        """Run `work`; if it raises, those jobs get a 500 (details in the log) and leave; the server goes on."""
        try:
            work()
        except Exception:
            traceback.print_exc()
            error = ApiError(500, "the server failed to answer this request; the server log has the details",
                             None, "generation_failed", "server_error")
            ids = {id(j) for j in jobs}
            for row in self._rows:
                if id(row.job) in ids:
                    row.done, row.extra["error"] = True, error
            for job in jobs:
                if not any(row.job is job for row in self._rows):
                    self._send(job, error)
                    self._send(job, DONE)
            if any(row.job is job for row in self._rows for job in jobs):  # a failed decode step leaves the
                self._batch = BatchCache()  # cache in an unknown state: all its rows went

    def _prefill(self, jobs: list[Job]) -> None:
        """One forward pass over the prompts of `jobs`; each row's first token; the unfinished rows join."""
        torch = self.torch
        for job in jobs:
            self._send(job, Started())
        self._flush()  # the consumers learn they started before the pass
        rows = [_Row(job, TextTracker(self.model.tokenizer, job.params.stop), _generator(torch, job.params))
                for job in jobs]
        with torch.inference_mode():
            prefixes = self.reuse.prefixes(jobs, self._adapters, self._pad_id) if self.reuse.on else []
            with self._adapters(jobs):
                if any(prefixes):
                    rests = [job.prompt[p.length if p is not None else 0:] for job, p in zip(jobs, prefixes)]
                    logits, keys, values, pads = self._forward.prefill_after(prefixes, rests, self._pad_id)
                else:
                    logits, cache, pads = self._forward.prefill([job.prompt for job in jobs], self._pad_id)
        self.metrics.add("tt_serve_prefills_total")
        self._take(rows, picker.pick(torch, logits, [job.params for job in jobs], [row.generator for row in rows]))
        going = [i for i, row in enumerate(rows) if not row.done]
        if going:
            if any(prefixes):
                self._batch.join_layers(torch, keys, values, going, pads)
            else:
                self._batch.join(torch, cache, going, pads)
            self._rows += [rows[i] for i in going]
        for row in rows:
            if row.done:
                self._finish(row)

    def _decode(self) -> None:
        torch, rows = self.torch, self._rows
        with torch.inference_mode(), self._adapters([r.job for r in rows]):
            logits = self._forward.step([row.next_token for row in rows], self._batch)
        self.metrics.add("tt_serve_decode_steps_total")
        self.metrics.high("tt_serve_batch_rows_max", len(rows))
        self._take(rows, picker.pick(torch, logits, [row.job.params for row in rows],
                                     [row.generator for row in rows]))

    def _adapters(self, jobs: list[Job]) -> Any:
        """The context of a forward pass over `jobs`' rows: on a multi-adapter server each row runs with its own
        adapter's LoRA from the bank (`Residency.rows`; one gathered product for mixed rows, PEFT's own ops when
        every row uses one adapter); nothing otherwise."""
        if self.residency is None:
            return contextlib.nullcontext()
        return self.residency.rows([job.adapter for job in jobs])

    def _load_adapters(self, admitted: list[Job]) -> list[Job]:
        """Make the admitted jobs' adapters resident (within --max-adapters, the running rows' kept); a job whose
        adapter cannot be loaded (its manifest check failed, or the bank refused a setting) gets 503 and leaves. Returns the jobs that can be prefilled."""
        in_use = {row.job.adapter.uid for row in self._rows}
        failed = dict(self.residency.ensure([job.adapter for job in admitted], in_use))
        for job in admitted:
            if job.adapter in failed:
                self._send(job, ApiError(503, f"the adapter {job.adapter.reference} is not loaded: its files failed "
                                              "their manifest check or it uses a setting this server cannot apply "
                                              "(the server log says which); restore its files or serve it alone "
                                              "with `tt serve ID`",
                                         "model", "adapter_unavailable", "server_error"))
                self._send(job, DONE)
        return [job for job in admitted if job.adapter not in failed]

    def _take(self, rows: list[_Row], tokens: list[int]) -> None:
        """Account each row's sampled token; send its text; mark a row done at a stop or its budget."""
        self.metrics.add("tt_serve_generated_tokens_total", len(rows))
        for row, token in zip(rows, tokens):
            row.produced += 1
            row.next_token = token
            if token in self.model.stop_ids:
                row.done, row.reason = True, "stop"
                continue
            delta = row.tracker.add(token)
            if delta:
                self._send(row.job, Delta(delta))
            if row.tracker.stopped:
                row.done, row.reason = True, "stop"
            elif row.produced >= row.job.max_new:
                row.done = True

    def _finish(self, row: _Row) -> None:
        error = row.extra.get("error")
        if error is not None:
            self._send(row.job, error)
        else:
            rest = row.tracker.finish()
            if rest:
                self._send(row.job, Delta(rest))
            self._send(row.job, Finish(row.reason, len(row.job.prompt), row.produced))
        self._send(row.job, DONE)

    def _drop_cancelled(self) -> None:
        for row in self._rows:
            if not row.done and row.job.cancel.is_set():
                row.done, row.extra["cancelled"] = True, True
                self.metrics.add("tt_serve_requests_cancelled_total")
        self._retire()

    def _retire(self) -> None:
        """Rows that are done leave the batch (and their jobs are answered)."""
        if not any(row.done for row in self._rows):
            return
        keep = [i for i, row in enumerate(self._rows) if not row.done]
        for row in self._rows:
            if row.done:
                if row.extra.get("cancelled"):
                    self._send(row.job, DONE)
                else:
                    self._finish(row)
        if self._batch.pads:
            self._batch.keep(self.torch, keep)
        self._rows = [self._rows[i] for i in keep]


def _deliver(items: list[tuple[Job, Any]]) -> None:
    for job, item in items:
        job.emit(item)


def _generator(torch: Any, params: ChatParams) -> Optional[Any]:
    """A sampling row's own generator, seeded by its `seed` or at random; greedy rows need none."""
    if params.temperature <= 0:
        return None
    return picker.seeded(torch, params.seed if params.seed is not None else secrets.randbits(63))
