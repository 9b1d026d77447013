"""uvicorn's h11 protocol, hardened against clients that hold connections: a header timeout, a send timeout and a
connection cap.

- Header timeout: uvicorn times out idle keep-alive connections but stops
  counting at the first byte of the next request, and a new connection has no
  timer at all. Here every request must finish its headers within
  `header_timeout` seconds of the connection opening or of the previous
  response ending; otherwise the connection is closed. (Slow bodies are timed
  out by the app, which reads them.)
- Send timeout: a client that stops reading leaves the answer in the socket's
  buffers; the app's next write then waits forever for room. Whenever data is
  waiting to be written, the connection is checked every `send_timeout`
  seconds and dropped (aborted: the unsent data is discarded, the fd freed) if
  the client read nothing since the last check. That covers every write: a
  paused stream, and the end of an answer left in the buffer after the app
  finished.
- Connection cap: at most `max_connections` connections are open. One more
  closes the connection that has waited longest for its next request's
  headers, if that has waited at least `MIN_IDLE` seconds (an idle client
  never starves a new one; a client whose headers are on their way is not
  taken for idle); otherwise it gets 503 and is closed. Both are logged at most once per `LOG_EVERY` seconds, with
  counts (`RateLimitedLog`), as are header timeouts (a thousand idle connections opened together time out
  together: a line each held the event loop) and asyncio's accept errors when the fd limit
  is reached after all.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Optional

from uvicorn.protocols.http.h11_impl import H11Protocol

LOG_EVERY = 10.0
MIN_IDLE = 1.0  # seconds a connection must have waited for headers before the cap may close it
_FULL_TEXT = b"the server has too many open connections; retry shortly"
SERVER_FULL = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\nconnection: close\r\nretry-after: 1"
               b"\r\ncontent-length: " + str(len(_FULL_TEXT)).encode() + b"\r\n\r\n" + _FULL_TEXT)


class RateLimitedLog:
    """Counts events by message and logs each message at most once per `every` seconds, with the count since
    its last line ("... (N times since the last such line)"); the first of a kind is logged at once."""

    def __init__(self, logger: logging.Logger, every: float = LOG_EVERY):
        self.logger, self.every = logger, every
        self._last: dict[str, float] = {}
        self._counts: dict[str, int] = {}

    def note(self, message: str) -> None:
        self._counts[message] = self._counts.get(message, 0) + 1
        now = time.monotonic()
        if now - self._last.get(message, float("-inf")) < self.every:
            return
        self._last[message], count = now, self._counts.pop(message)
        self.logger.warning("%s (%d time%s since the last such line)", message, count, "" if count == 1 else "s")


class AcceptErrorFilter(logging.Filter):
    """Passes asyncio's 'socket.accept() out of system resource' error (a traceback each time) once per `every` s."""

    def __init__(self, every: float = LOG_EVERY):
        super().__init__()
        self.every, self._last, self.dropped = every, float("-inf"), 0

    def filter(self, record: logging.LogRecord) -> bool:
        if "socket.accept() out of system resource" not in str(record.msg):
            return True
        now = time.monotonic()
        if now - self._last < self.every:
            self.dropped += 1
            return False
        self._last, record.exc_info, record.exc_text = now, None, None
        record.msg = f"{record.msg} (the fd limit is reached; {self.dropped} more since the last such line)"
        self.dropped = 0
        return True


def hardened_protocol(header_timeout: float, send_timeout: float = 30.0, max_connections: Optional[int] = None,
                      logger: Optional[logging.Logger] = None) -> type:
    """The protocol class for uvicorn's `http=`; one class per server (it holds that server's idle connections)."""
    waiting: dict[Any, None] = {}  # connections waiting for headers, oldest first
    overflow = RateLimitedLog(logger or logging.getLogger("uvicorn.error"))

    class HardenedProtocol(H11Protocol):
        _header_timer: Optional[asyncio.TimerHandle] = None
        _send_timer: Optional[asyncio.TimerHandle] = None
        _waiting_cycle: Any = None
        _unsent = 0
        _idle_since = 0.0

        # -- header timeout ---------------------------------------------------------------------------

        def _arm(self) -> None:
            self._disarm()
            self._waiting_cycle = self.cycle
            self._header_timer = self.loop.call_later(header_timeout, self._headers_too_slow)
            self._idle_since = self.loop.time()
            waiting[self] = None

        def _disarm(self) -> None:
            waiting.pop(self, None)
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_too_slow(self) -> None:
            self._header_timer = None
            waiting.pop(self, None)
            if not self.transport.is_closing():
                # rate-limited: idle connections opened together time out together (a line each held the loop)
                overflow.note(f"closed a connection that did not send its headers in {header_timeout:g} s")
                self.transport.close()

        # -- send timeout -----------------------------------------------------------------------------

        def _watch_sending(self) -> None:
            """Start checking the unsent data, if there is any and no check is pending."""
            if self._send_timer is None and self.transport.get_write_buffer_size() > 0:
                self._unsent = self.transport.get_write_buffer_size()
                self._send_timer = self.loop.call_later(send_timeout, self._check_sending)

        def _check_sending(self) -> None:
            self._send_timer = None
            unsent = self.transport.get_write_buffer_size()
            if unsent == 0:
                return
            if unsent >= self._unsent:  # the client read nothing in send_timeout seconds
                overflow.note(f"dropped a connection whose client read nothing for {send_timeout:g} s")
                self.transport.abort()
                return
            self._unsent = unsent
            self._send_timer = self.loop.call_later(send_timeout, self._check_sending)

        def pause_writing(self) -> None:
            super().pause_writing()
            self._watch_sending()

        # -- the cap and the life of a connection ----------------------------------------------------

        def connection_made(self, transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if max_connections is not None and len(self.connections) > max_connections:
                oldest = next(iter(waiting), None)
                if oldest is not None and self.loop.time() - oldest._idle_since >= MIN_IDLE:
                    oldest._disarm()
                    oldest.transport.abort()
                    overflow.note(f"closed the longest-idle connection: at --max-connections {max_connections}")
                else:
                    overflow.note(f"refused a connection with 503: --max-connections {max_connections} are busy")
                    transport.write(SERVER_FULL)
                    transport.close()
                    self._watch_sending()
                    return
            self._arm()

        def handle_events(self) -> None:
            super().handle_events()
            if self._header_timer is not None and self.cycle is not self._waiting_cycle:
                self._disarm()  # a request's headers are complete: the app owns the rest

        def on_response_complete(self) -> None:
            self._watch_sending()  # an answer left in the buffer by a client that does not read
            if not self.transport.is_closing():
                self._arm()  # before super(): it may start a pipelined request, which disarms
            super().on_response_complete()

        def connection_lost(self, exc: Optional[Exception]) -> None:
            self._disarm()
            if self._send_timer is not None:
                self._send_timer.cancel()
                self._send_timer = None
            super().connection_lost(exc)

    return HardenedProtocol
