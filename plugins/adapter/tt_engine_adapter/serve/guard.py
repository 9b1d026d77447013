"""Checks every request passes before a route runs: the Host header (DNS rebinding), the API key, JSON bodies.

A keyless server on loopback is reachable by any web page the user opens:

- a page on another site can POST to it with a CORS-"simple" content type
  (`text/plain`, form encodings) without a preflight, so chat requests must be
  `Content-Type: application/json` (415 otherwise; a browser must then send a
  preflight, which this server never approves: it sends no CORS headers);
- DNS rebinding points a name the attacker controls at 127.0.0.1, after which
  the page can read the answers; the browser still sends that name in `Host`,
  so `Host` must name the bound address (for a loopback bind also `localhost`,
  `127.0.0.1`, `::1`) or a name given with `--allowed-host`. A wildcard bind
  (`0.0.0.0`, `::`, which needs an API key) also accepts `localhost` and any
  IP-address literal: rebinding always goes through a name.

`HostCheck` is plain ASGI middleware so it covers every route, 404s included.
"""

from __future__ import annotations

import hmac
import ipaddress
from typing import Any, Iterable, Optional
from urllib.parse import urlsplit

from starlette.responses import JSONResponse
from tt_stagekit.addresses import is_loopback

from tt_engine_adapter.serve.request import ApiError

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
WILDCARDS = frozenset({"0.0.0.0", "::"})


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def host_name(header: str) -> Optional[str]:
    """The lower-case host name of a `Host` header value (`name`, `name:port`, `[v6]:port`), or None."""
    header = header.strip()
    if not header or any(c in header for c in "/?#@ \\"):
        return None
    try:
        parts = urlsplit("//" + header)
        _ = parts.port  # an invalid port raises
    except ValueError:
        return None
    name = parts.hostname
    return name.rstrip(".") if name else None


class HostPolicy:
    """Which `Host` names this server answers to."""

    def __init__(self, bound: str, extra: Iterable[str] = ()):
        bound = bound.strip("[]").lower()
        self.names = {bound} | {name.strip("[]").lower().rstrip(".") for name in extra}
        if is_loopback(bound) or bound in WILDCARDS:  # a wildcard bind listens on loopback too
            self.names |= LOOPBACK_NAMES
        self.any_ip = bound in WILDCARDS

    def allows(self, header: Optional[str]) -> bool:
        name = host_name(header) if header else None
        if name is None:
            return False
        return name in self.names or (self.any_ip and _is_ip(name))


OPEN_PATHS = frozenset({"/health"})


class HostCheck:
    """ASGI middleware, run as soon as a request's headers have arrived: a `Host` this server does not answer to
    gets 400 `invalid_host`; with an API key, a request to anything but `/health` without it gets 401
    `invalid_api_key` and the connection is closed (no body is read, nothing is kept alive for it)."""

    def __init__(self, app: Any, policy: HostPolicy, api_key: Optional[str] = None):
        self.app, self.policy, self.api_key = app, policy, api_key

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            headers = {k: v.decode("latin-1") for k, v in scope["headers"] if k in (b"host", b"authorization")}
            if not self.policy.allows(headers.get(b"host")):
                error = ApiError(400, "the Host header does not name this server; start it with --allowed-host NAME "
                                      "to answer to another name", None, "invalid_host")
                await JSONResponse(error.body(), status_code=400)(scope, receive, send)
                return
            if (self.api_key and scope["path"] not in OPEN_PATHS
                    and not key_matches(headers.get(b"authorization", ""), self.api_key)):
                error = ApiError(401, "a valid API key is required: send 'Authorization: Bearer <key>'", None,
                                 "invalid_api_key")
                await JSONResponse(error.body(), status_code=401,
                                   headers={"WWW-Authenticate": "Bearer", "Connection": "close"})(scope, receive, send)
                return
        await self.app(scope, receive, send)


def is_json(content_type: Optional[str]) -> bool:
    """True for `application/json` (parameters such as `charset=utf-8` allowed)."""
    return (content_type or "").split(";", 1)[0].strip().lower() == "application/json"


def not_json() -> ApiError:
    return ApiError(415, "the request body must be JSON sent with 'Content-Type: application/json'", None,
                    "unsupported_media_type")


def key_matches(authorization: str, api_key: str) -> bool:
    """`Authorization: Bearer KEY`, compared in constant time."""
    scheme, _, token = authorization.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), api_key.encode())
