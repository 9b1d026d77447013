"""Network addresses a server binds: which are loopback-only, and the API key a server needs (stdlib only).

`tt serve` (host side) and every engine's server refuse a non-loopback address without an API key, and a
key too short to be safe; both decide "loopback" and make that check here, with the same messages.
"""

from __future__ import annotations

import ipaddress
from typing import Optional

from tt_stagekit.contract import InvalidInput

MIN_API_KEY_CHARS = 16  # a shorter key is guessed

_GIVE_KEY = ("--api-key-file FILE (the key alone on one line), the TT_API_KEY environment variable or "
             "--api-key KEY")


def is_loopback(host: str) -> bool:
    """`localhost`, 127.0.0.0/8 or ::1 (brackets allowed: `[::1]`)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_api_key(key: Optional[str], host: str) -> None:
    """InvalidInput (exit 2) when the API key is too short, or when `host` is not loopback and there is no key
    (an empty key is none). `tt serve` calls it on its options, an engine's server on the key it was given."""
    if key and len(key) < MIN_API_KEY_CHARS:
        raise InvalidInput(f"the API key is {len(key)} characters long; use at least {MIN_API_KEY_CHARS} (make one "
                           "with `python -c 'import secrets; print(secrets.token_urlsafe(24))'`) and give it with "
                           f"{_GIVE_KEY}")
    if not key and not is_loopback(host):
        raise InvalidInput(f"refusing to listen on {host} without an API key: any address other than loopback needs "
                           f"one, given with {_GIVE_KEY}, and every request must then send "
                           "'Authorization: Bearer KEY'")
