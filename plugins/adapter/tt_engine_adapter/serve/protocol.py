"""uvicorn's h11 protocol with a header-read timeout, so a slow client cannot hold a connection forever.

uvicorn times out idle keep-alive connections but stops counting at the first
byte of the next request, and a new connection has no timer at all: a client
that sends its headers one byte a minute (or nothing) keeps its socket and its
memory indefinitely. Here every request must finish its headers within
`header_timeout` seconds of the connection opening or of the previous response
ending; otherwise the connection is closed. (Slow bodies are timed out by the
app, which reads them.)
"""

from __future__ import annotations

import asyncio
from typing import Any, Optional

from uvicorn.protocols.http.h11_impl import H11Protocol


def protocol_with_header_timeout(header_timeout: float) -> type:
    class HeaderTimeoutProtocol(H11Protocol):
        _header_timer: Optional[asyncio.TimerHandle] = None
        _waiting_cycle: Any = None

        def _arm(self) -> None:
            self._disarm()
            self._waiting_cycle = self.cycle
            self._header_timer = self.loop.call_later(header_timeout, self._headers_too_slow)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_too_slow(self) -> None:
            self._header_timer = None
            if not self.transport.is_closing():
                self.logger.warning("closing a connection that did not send its headers in %ss", header_timeout)
                self.transport.close()

        def connection_made(self, transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def handle_events(self) -> None:
            super().handle_events()
            if self._header_timer is not None and self.cycle is not self._waiting_cycle:
                self._disarm()  # a request's headers are complete: the app owns the rest

        def on_response_complete(self) -> None:
            if not self.transport.is_closing():
                self._arm()  # before super(): it may start a pipelined request, which disarms
            super().on_response_complete()

        def connection_lost(self, exc: Optional[Exception]) -> None:
            self._disarm()
            super().connection_lost(exc)

    return HeaderTimeoutProtocol
