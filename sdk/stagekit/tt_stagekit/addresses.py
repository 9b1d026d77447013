"""Network addresses a server binds: which are loopback-only (stdlib only).

`tt serve` (host side) and every engine's server refuse a non-loopback address without an API key;
both decide "loopback" here.
"""

from __future__ import annotations

import ipaddress


def is_loopback(host: str) -> bool:
    """`localhost`, 127.0.0.0/8 or ::1 (brackets allowed: `[::1]`)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
