"""Canonical JSON text: the one serialisation every fingerprint, cache key and digest of the host hashes.

Keys sorted, no spaces, UTF-8 kept as is, anything JSON cannot hold written as its `str`. Imports nothing of tt.
"""

from __future__ import annotations

import json
from typing import Any


def canonical(data: Any) -> str:
    return json.dumps(data, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
