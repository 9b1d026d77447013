"""The teacher over HTTP: OpenAI chat completions with a cache, retries, concurrency, a rate limit and a stop.

stdlib only (the host stays torch-free and gains no dependency). `TeacherClient.complete` answers a list of
request bodies in order: a body whose hash the cache holds is answered from it (no request); the others go
out on at most `concurrency` daemon threads, each start spaced by `requests_per_minute`. Each attempt is
one bounded POST (transport.py: one deadline of `timeout_seconds` across connect, headers and body; a body
cap of `body_cap(max_tokens)`; no redirects; depth-limited JSON). A 429, a 5xx, a 408, a timeout, a refused
connection, a body over the cap or a 200 whose body is not a chat completion is retried up to
`max_retries` times with exponential backoff (0.5 s doubling, at most 30 s), waiting what `Retry-After`
says instead when the server sends it (seconds or an HTTP date, at most `RETRY_AFTER_CAP`). Every request,
its retries and waits included, ends by its overall deadline (`overall_seconds`): a wait that would pass
it is not taken. A redirect, any other 4xx, or retries used up is a `TeacherError` naming the URL, with
the server's text stripped of terminal controls. `stop` (a threading.Event the stage's signal handler
sets) ends the wait at once: what arrived is already in the cache; requests still in flight are abandoned
(their threads are daemons, so the process never waits on them).
"""

from __future__ import annotations

import email.utils
import http.client
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Sequence

from tt_host.errors import TTError
from tt_host.synthesis.cache import RequestCache, request_hash
from tt_host.synthesis.transport import DeadlineExceeded, TooDeep, TooLarge, loads, post, printable

RETRY_AFTER_CAP = 300.0
BACKOFF_START, BACKOFF_CAP = 0.5, 30.0
RETRIED_STATUS = {408, 409, 429}
BODY_CAP_MAX = 16 * 1024 * 1024
BODY_BYTES_PER_TOKEN = 64  # a token is a few characters; JSON may escape each as \uXXXX


def body_cap(body: Mapping[str, Any]) -> int:
    """The most bytes a 200 answer to `body` may have: 64 KiB plus 64 bytes per asked `max_tokens`, at most
    16 MiB. A longer body is a bad answer (retried, never cached)."""
    tokens = body.get("max_tokens")
    tokens = tokens if isinstance(tokens, int) and tokens > 0 else 32_768
    return min(BODY_CAP_MAX, 64 * 1024 + BODY_BYTES_PER_TOKEN * tokens)


def backoff(attempt: int) -> float:
    return min(BACKOFF_CAP, BACKOFF_START * 2 ** attempt)


class TeacherError(TTError):
    """The teacher could not be used: the message names the URL, what it answered and what to try."""


class Stopped(Exception):
    """A stop was asked for (SIGINT/SIGTERM); everything received is in the cache."""


@dataclass(frozen=True)
class ClientSettings:
    concurrency: int = 4
    requests_per_minute: Optional[float] = None
    timeout_seconds: float = 120.0
    max_retries: int = 5

    @property
    def overall_seconds(self) -> float:
        """How long one request may take, retries and waits included: every attempt's deadline, the default
        backoff between them and a second for the work around them. A longer Retry-After is not waited for."""
        return self.timeout_seconds * (self.max_retries + 1) + sum(backoff(i) for i in range(self.max_retries)) + 1


@dataclass
class Spent:
    """What the teacher cost this time: requests sent (retries included), answers taken from the cache,
    tokens the answers report (`usage`), and why requests were retried."""

    requests: int = 0
    cached: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    retries: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, **counts: int) -> None:
        with self.lock:
            for name, value in counts.items():
                setattr(self, name, getattr(self, name) + value)

    def retried(self, reason: str) -> None:
        with self.lock:
            self.retries[reason] = self.retries.get(reason, 0) + 1


class RateLimit:
    """Spaces request starts by 60 / requests_per_minute seconds (no limit when None)."""

    def __init__(self, per_minute: Optional[float]):
        self.gap = 60.0 / per_minute if per_minute else 0.0
        self.next = 0.0
        self.lock = threading.Lock()

    def wait(self, stop: threading.Event) -> None:
        if not self.gap:
            return
        with self.lock:
            start = max(self.next, time.monotonic())
            self.next = start + self.gap
        delay = start - time.monotonic()
        if delay > 0 and stop.wait(delay):
            raise Stopped


def retry_after(value: Optional[str]) -> Optional[float]:
    """Seconds a Retry-After header asks for (a number or an HTTP date), None when absent or unreadable."""
    if not value:
        return None
    try:
        return min(RETRY_AFTER_CAP, max(0.0, float(value)))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return min(RETRY_AFTER_CAP, max(0.0, when.timestamp() - time.time()))


def completion_text(response: Mapping[str, Any]) -> Optional[str]:
    """choices[0].message.content of a chat completion, or None when it has none."""
    try:
        content = response["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        return None
    return content if isinstance(content, str) else None


class _Retry(Exception):
    def __init__(self, reason: str, detail: str, wait: Optional[float] = None):
        super().__init__(detail)
        self.reason, self.detail, self.wait = reason, detail, wait


class TeacherClient:
    """Chat completions at `<url>/chat/completions` for `model`, with `api_key` (None: no Authorization)."""

    def __init__(self, url: str, api_key: Optional[str], cache: RequestCache, settings: ClientSettings,
                 stop: threading.Event, on_sent: Callable[[int], None] = lambda count: None):
        self.endpoint = url.rstrip("/") + "/chat/completions"
        self.api_key, self.cache, self.settings, self.stop = api_key, cache, settings, stop
        self.spent = Spent()
        self.rate = RateLimit(settings.requests_per_minute)
        self.on_sent = on_sent

    def key(self, body: Mapping[str, Any]) -> str:
        return request_hash(self.endpoint, body)

    def complete(self, bodies: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """The chat completion of each body, in order (from the cache where it has one)."""
        results: list[Optional[dict[str, Any]]] = [None] * len(bodies)
        missing = []
        for index, body in enumerate(bodies):
            cached = self.cache.get(self.key(body), self.endpoint, body)
            if cached is not None:
                results[index] = cached
                self.spent.add(cached=1)
            else:
                missing.append(index)
        if missing:
            self._fetch_all(bodies, missing, results)
        return [result for result in results if result is not None]

    def _fetch_all(self, bodies: Sequence[Mapping[str, Any]], missing: list[int],
                   results: list[Optional[dict[str, Any]]]) -> None:
        queue = list(reversed(missing))
        lock, finished = threading.Lock(), threading.Event()
        failure: list[BaseException] = []
        left = [len(missing)]

        def worker() -> None:
            while True:
                with lock:
                    if not queue or failure or self.stop.is_set():
                        return
                    index = queue.pop()
                try:
                    results[index] = self._fetch(bodies[index])
                except BaseException as exc:  # handed to the waiting thread, which raises it
                    with lock:
                        failure.append(exc)
                    finished.set()
                    return
                with lock:
                    left[0] -= 1
                    if not left[0]:
                        finished.set()

        for _ in range(min(self.settings.concurrency, len(missing))):
            threading.Thread(target=worker, daemon=True, name="tt-teacher").start()
        while not finished.wait(0.1):
            if self.stop.is_set():
                raise Stopped
        if failure:
            raise failure[0]
        if self.stop.is_set() and any(results[i] is None for i in missing):
            raise Stopped

    def _fetch(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """One request, retried until its overall deadline; cached once answered."""
        attempts = self.settings.max_retries + 1
        ends = time.monotonic() + self.settings.overall_seconds
        last, made = "", 0
        for attempt in range(attempts):
            if self.stop.is_set():
                raise Stopped
            self.rate.wait(self.stop)
            left = ends - time.monotonic()
            if left <= 0:
                break
            made += 1
            try:
                response = self._post(body, min(self.settings.timeout_seconds, left))
            except _Retry as retry:
                self.spent.retried(retry.reason)
                last = retry.detail
                if attempt + 1 < attempts:
                    delay = retry.wait if retry.wait is not None else backoff(attempt)
                    if time.monotonic() + delay >= ends:
                        last += f"; it asked to wait {delay:g}s more, past the deadline"
                        break
                    if self.stop.wait(delay):
                        raise Stopped
                continue
            self.cache.put(self.key(body), self.endpoint, body, response)
            return response
        raise TeacherError(f"the teacher at {self.endpoint} gave no usable answer in {made} attempt(s) within this "
                           f"request's deadline of {self.settings.overall_seconds:g}s; last: {last}. Check that the "
                           "server is up and answers chat completions, or raise synthesis.timeout_seconds / "
                           "synthesis.max_retries")

    def _post(self, body: Mapping[str, Any], seconds: float) -> dict[str, Any]:
        data = json.dumps(body, ensure_ascii=False).encode("utf-8")
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        cap = body_cap(body)
        self.spent.add(requests=1)
        self.on_sent(self.spent.requests)
        try:
            answer = post(self.endpoint, data, headers, seconds, cap)
        except DeadlineExceeded:
            raise _Retry("timeout", f"no complete answer within {seconds:g}s (one deadline across connect, "
                         "headers and body)") from None
        except TooLarge:
            raise _Retry("too_large", f"the answer is larger than {cap} bytes (64 KiB + 64 bytes per "
                         "max_tokens); not kept") from None
        except OSError as exc:
            raise _Retry("connection", f"cannot connect: {printable(str(exc))}") from None
        except (ValueError, http.client.HTTPException) as exc:
            raise _Retry("bad_response", f"not a readable HTTP answer: {printable(repr(exc))}") from None
        if 300 <= answer.status < 400:
            where = printable(answer.headers.get("Location") or "nowhere")
            raise TeacherError(f"the teacher at {self.endpoint} answered HTTP {answer.status}, a redirect to "
                               f"{where}; tt follows no redirect (the key must not travel to another address): "
                               "set synthesis.teacher.base_url to the final address")
        if answer.status != 200:
            excerpt = _excerpt(answer.body)
            if answer.status in RETRIED_STATUS or answer.status >= 500:
                raise _Retry(f"http_{answer.status}", f"HTTP {answer.status} {excerpt}".strip(),
                             retry_after(answer.headers.get("Retry-After")))
            hint = (" (check TT_TEACHER_API_KEY, sent only to the origin TT_TEACHER_ORIGIN approves)"
                    if answer.status in (401, 403) else " (check synthesis.teacher.model and base_url)")
            raise TeacherError(f"the teacher at {self.endpoint} answered HTTP {answer.status}{hint}: {excerpt}")
        try:
            response = loads(answer.body)
        except TooDeep as exc:
            raise _Retry("bad_response", f"the body is {exc}") from None
        except ValueError:
            raise _Retry("bad_response", f"the body is not JSON: {_excerpt(answer.body)}") from None
        if not isinstance(response, dict) or completion_text(response) is None:
            raise _Retry("bad_response", f"not a chat completion (no choices[0].message.content): "
                         f"{_excerpt(answer.body)}")
        usage = response.get("usage") if isinstance(response.get("usage"), dict) else {}
        self.spent.add(prompt_tokens=_count(usage.get("prompt_tokens")),
                       completion_tokens=_count(usage.get("completion_tokens")))
        return response


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _excerpt(raw: bytes, limit: int = 200) -> str:
    """The start of what a server sent, as text safe to print (no terminal controls)."""
    return printable(raw[: limit * 8].decode("utf-8", "replace"), limit)
