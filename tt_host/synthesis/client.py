"""The teacher over HTTP: OpenAI chat completions with a cache, retries, concurrency, a rate limit and a stop.

stdlib urllib only (the host stays torch-free and gains no dependency). `TeacherClient.complete` answers a
list of request bodies in order: a body whose hash the cache holds is answered from it (no request); the
others go out on at most `concurrency` daemon threads, each start spaced by `requests_per_minute`. A 429,
a 5xx, a 408, a timeout, a refused connection or a 200 whose body is not a chat completion is retried up
to `max_retries` times with exponential backoff (0.5 s doubling, at most 30 s), waiting what `Retry-After`
says instead when the server sends it (seconds or an HTTP date, at most `RETRY_AFTER_CAP`). Any other 4xx,
or retries used up, is a `TeacherError` naming the URL. `stop` (a threading.Event the stage's signal handler
sets) ends the wait at once: what arrived is already in the cache; requests still in flight are abandoned
(their threads are daemons, so the process never waits on them).
"""

from __future__ import annotations

import email.utils
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Sequence

from tt_host.errors import TTError
from tt_host.synthesis.cache import RequestCache, request_hash

RETRY_AFTER_CAP = 300.0
BACKOFF_START, BACKOFF_CAP = 0.5, 30.0
RETRIED_STATUS = {408, 409, 429}


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
            cached = self.cache.get(self.key(body))
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
        """One request, retried; cached once answered."""
        attempts = self.settings.max_retries + 1
        last = ""
        for attempt in range(attempts):
            if self.stop.is_set():
                raise Stopped
            self.rate.wait(self.stop)
            try:
                response = self._post(body)
            except _Retry as retry:
                self.spent.retried(retry.reason)
                last = retry.detail
                if attempt + 1 < attempts:
                    delay = retry.wait if retry.wait is not None else min(BACKOFF_CAP, BACKOFF_START * 2 ** attempt)
                    if self.stop.wait(delay):
                        raise Stopped
                continue
            self.cache.put(self.key(body), self.endpoint, body, response)
            return response
        raise TeacherError(f"the teacher at {self.endpoint} gave no usable answer in {attempts} attempt(s); last: "
                           f"{last}. Check that the server is up and answers chat completions, or raise "
                           "synthesis.timeout_seconds / synthesis.max_retries")

    def _post(self, body: Mapping[str, Any]) -> dict[str, Any]:
        data = json.dumps(body, ensure_ascii=False).encode("utf-8")
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(self.endpoint, data=data, headers=headers, method="POST")
        self.spent.add(requests=1)
        self.on_sent(self.spent.requests)
        try:
            with urllib.request.urlopen(request, timeout=self.settings.timeout_seconds) as answer:
                raw = answer.read()
        except urllib.error.HTTPError as exc:
            excerpt = _excerpt(exc.read() if exc.fp else b"")
            if exc.code in RETRIED_STATUS or exc.code >= 500:
                raise _Retry(f"http_{exc.code}", f"HTTP {exc.code} {excerpt}".strip(),
                             retry_after(exc.headers.get("Retry-After") if exc.headers else None)) from None
            hint = (" (check the key in the variable synthesis.teacher.api_key_env names)"
                    if exc.code in (401, 403) else " (check synthesis.teacher.model and base_url)")
            raise TeacherError(f"the teacher at {self.endpoint} answered HTTP {exc.code}{hint}: {excerpt}") from None
        except (socket.timeout, TimeoutError):
            raise _Retry("timeout", f"no answer within {self.settings.timeout_seconds:g}s") from None
        except (urllib.error.URLError, ConnectionError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            if isinstance(reason, (socket.timeout, TimeoutError)):
                raise _Retry("timeout", f"no answer within {self.settings.timeout_seconds:g}s") from None
            raise _Retry("connection", f"cannot connect: {reason}") from None
        try:
            response = json.loads(raw)
        except ValueError:
            raise _Retry("bad_response", f"the body is not JSON: {_excerpt(raw)}") from None
        if not isinstance(response, dict) or completion_text(response) is None:
            raise _Retry("bad_response", f"not a chat completion (no choices[0].message.content): {_excerpt(raw)}")
        usage = response.get("usage") if isinstance(response.get("usage"), dict) else {}
        self.spent.add(prompt_tokens=_count(usage.get("prompt_tokens")),
                       completion_tokens=_count(usage.get("completion_tokens")))
        return response


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _excerpt(raw: bytes, limit: int = 200) -> str:
    text = raw.decode("utf-8", "replace").strip().replace("\n", " ")
    return text[:limit] + ("…" if len(text) > limit else "")
