"""Continuous batching: one thread owns the model and decodes every running sequence in one forward pass per step.

Requests become `Job`s (prompt ids, answer budget, sampling settings, a cancel
flag, a thread-safe `emit`). The scheduler thread loops:

1. drops jobs whose client went away (running or waiting) and answers waiting
   jobs that outlived `--queue-timeout` (503, `Retry-After`);
2. admits waiting jobs, first come first served, while the batch has fewer
   than `max_batch` rows and `rows x longest reservation` (prompt + answer
   budget, the padded KV cache it can grow to) stays within
   `max_batch_tokens`; each is prefilled alone (exactly the computation a
   lone request gets) and its cache joins the batch;
3. runs one decode step for all rows: the per-layer caches are left-padded to
   a common length, the padding masked out and each row given its own
   positions, so a row computes what it would alone; each row picks its next
   token (greedy or its own seeded sampler), and rows that finish leave.

With one row there is no padding at all. `max_batch` 1 is one request at a
time (batching off). Each job's items are `Started`, `Delta`s, one `Finish`
or an `ApiError`, then `DONE`.
"""

from __future__ import annotations

import inspect
import secrets
import threading
import time
import traceback
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from tt_engine_adapter.serve.generation import ChatModel, Delta, Finish, TextTracker
from tt_engine_adapter.serve.request import ApiError, ChatParams

DONE = object()


class Started:
    """The job entered the running batch (sent before its first token)."""


@dataclass
class Job:
    params: ChatParams
    prompt: list[int]
    max_new: int
    emit: Callable[[Any], None]
    cancel: threading.Event
    deadline: float  # time.monotonic() by which it must have started

    @property
    def reserve(self) -> int:
        return len(self.prompt) + self.max_new


@dataclass
class _Row:
    job: Job
    tracker: TextTracker
    generator: Any
    next_token: int = -1
    produced: int = 0
    done: bool = False
    reason: str = "length"
    extra: dict = field(default_factory=dict)


class _BatchCache:
    """Per-layer key/value tensors `[rows, heads, length, dim]`, each row left-padded by `pads[row]` positions."""

    def __init__(self) -> None:
        self.keys: list[Any] = []
        self.values: list[Any] = []
        self.pads: list[int] = []

    @property
    def length(self) -> int:
        return int(self.keys[0].shape[2]) if self.keys else 0

    def add(self, torch: Any, keys: list[Any], values: list[Any]) -> None:
        new_len, length = int(keys[0].shape[2]), self.length
        if not self.pads:
            self.keys, self.values, self.pads = list(keys), list(values), [0]
            return
        if new_len < length:
            keys, values = [_left_pad(torch, t, length - new_len) for t in keys], \
                [_left_pad(torch, t, length - new_len) for t in values]
        elif new_len > length:
            self.keys = [_left_pad(torch, t, new_len - length) for t in self.keys]
            self.values = [_left_pad(torch, t, new_len - length) for t in self.values]
            self.pads = [p + new_len - length for p in self.pads]
        self.keys = [torch.cat([a, b]) for a, b in zip(self.keys, keys)]
        self.values = [torch.cat([a, b]) for a, b in zip(self.values, values)]
        self.pads.append(max(0, length - new_len))

    def keep(self, torch: Any, rows: list[int]) -> None:
        if not rows:
            self.keys, self.values, self.pads = [], [], []
            return
        index = torch.tensor(rows, device=self.keys[0].device)
        trim = min(self.pads[r] for r in rows)  # padding every remaining row has is dropped
        self.keys = [t.index_select(0, index)[:, :, trim:] for t in self.keys]
        self.values = [t.index_select(0, index)[:, :, trim:] for t in self.values]
        self.pads = [self.pads[r] - trim for r in rows]


def _left_pad(torch: Any, tensor: Any, amount: int) -> Any:
    shape = list(tensor.shape)
    shape[2] = amount
    return torch.cat([tensor.new_zeros(shape), tensor], dim=2)


def _layers(cache: Any) -> tuple[list[Any], list[Any]]:
    keys, values = [], []
    for entry in cache:
        keys.append(entry[0])
        values.append(entry[1])
    return keys, values


class Scheduler:
    """The running batch and the queue in front of it; `submit` from any thread, `start` once."""

    def __init__(self, model: ChatModel, max_batch: int, max_batch_tokens: int):
        from transformers import DynamicCache

        self.model, self.torch, self.metrics = model, model.torch, model.metrics
        self.max_batch, self.max_batch_tokens = max_batch, max_batch_tokens
        self._cache_class = DynamicCache
        base = model.model.get_base_model() if hasattr(model.model, "get_base_model") else model.model
        self._cache_kwarg = "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"
        self._pending: deque[Job] = deque()
        self._cond = threading.Condition()
        self._rows: list[_Row] = []
        self._batch = _BatchCache()
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
        if True:
            with self._cond:
                while not self._pending and not self._rows:
                    self._cond.wait()
                admitted = self._admit()
            self._drop_cancelled()
            for job in admitted:
                self._guarded([job], lambda: self._prefill(job))
            if self._rows:
                self._guarded([r.job for r in self._rows], self._decode)
            self._retire()
            self.metrics.set("tt_serve_requests_running", len(self._rows))

    def _admit(self) -> list[Job]:
        now, kept, admitted = time.monotonic(), deque(), []
        longest = max((r.job.reserve for r in self._rows), default=0)
        while self._pending:
            job = self._pending.popleft()
            if job.cancel.is_set():
                self.metrics.add("tt_serve_requests_cancelled_total")
                job.emit(DONE)
                continue
            rows = len(self._rows) + len(admitted) + 1
            fits = not kept and rows <= self.max_batch and rows * max(longest, job.reserve) <= self.max_batch_tokens
            if fits:
                admitted.append(job)
                longest = max(longest, job.reserve)
            elif now > job.deadline:
                job.emit(ApiError(503, "the request waited longer than the server's --queue-timeout for a place in "
                                       "the running batch; retry shortly", None, "queue_timeout", "server_error"))
                job.emit(DONE)
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
                    job.emit(error)
                    job.emit(DONE)
            if len(jobs) > 1:  # a failed batch step leaves the cache in an unknown state: all its rows went
                self._batch = _BatchCache()

    def _prefill(self, job: Job) -> None:
        torch, params = self.torch, job.params
        job.emit(Started())
        generator = torch.Generator(device="cpu")
        generator.manual_seed(params.seed if params.seed is not None else secrets.randbits(63))
        row = _Row(job, TextTracker(self.model.tokenizer, params.stop), generator)
        cache = self._cache_class()
        with torch.inference_mode():
            ids = torch.tensor([job.prompt], dtype=torch.long, device=self.model.device)
            out = self.model.model(input_ids=ids, use_cache=True, **{self._cache_kwarg: cache})
        self.metrics.add("tt_serve_prefills_total")
        self._take(row, self.model.pick(out.logits[0, -1].float(), params, generator))
        if not row.done:
            keys, values = _layers(cache)
            self._batch.add(torch, keys, values)
            self._rows.append(row)
        else:
            self._finish(row)

    def _decode(self) -> None:
        torch, batch = self.torch, self._batch
        rows = len(self._rows)
        device = self.model.device
        length = batch.length
        mask = torch.ones((rows, length + 1), dtype=torch.long, device=device)
        for i, pad in enumerate(batch.pads):
            mask[i, :pad] = 0
        positions = torch.tensor([[length - pad] for pad in batch.pads], dtype=torch.long, device=device)
        tokens = torch.tensor([[row.next_token] for row in self._rows], dtype=torch.long, device=device)
        cache = self._cache_class(ddp_cache_data=list(zip(batch.keys, batch.values)))
        with torch.inference_mode():
            out = self.model.model(input_ids=tokens, attention_mask=mask, position_ids=positions, use_cache=True,
                                   **{self._cache_kwarg: cache})
        self.metrics.add("tt_serve_decode_steps_total")
        self.metrics.high("tt_serve_batch_rows_max", rows)
        batch.keys, batch.values = _layers(cache)
        logits = out.logits[:, -1].float()
        for i, row in enumerate(self._rows):
            if not row.done:
                self._take(row, self.model.pick(logits[i], row.job.params, row.generator))

    def _take(self, row: _Row, token: int) -> None:
        """Account one sampled token for a row; send its text; mark the row done at a stop or its budget."""
        row.produced += 1
        row.next_token = token
        self.metrics.add("tt_serve_generated_tokens_total")
        if token in self.model.stop_ids:
            row.done, row.reason = True, "stop"
            return
        delta = row.tracker.add(token)
        if delta:
            row.job.emit(Delta(delta))
        if row.tracker.stopped:
            row.done, row.reason = True, "stop"
        elif row.produced >= row.job.max_new:
            row.done = True

    def _finish(self, row: _Row) -> None:
        error = row.extra.get("error")
        if error is not None:
            row.job.emit(error)
        else:
            rest = row.tracker.finish()
            if rest:
                row.job.emit(Delta(rest))
            row.job.emit(Finish(row.reason, len(row.job.prompt), row.produced))
        row.job.emit(DONE)

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
                    row.job.emit(DONE)
                else:
                    self._finish(row)
        if self._batch.pads:
            self._batch.keep(self.torch, keep)
        self._rows = [self._rows[i] for i in keep]
