"""Every teacher answer on disk, by the hash of its request: a repeated or resumed run asks nothing twice.

The key is sha256 over the canonical JSON of the endpoint URL and the request body (model, messages,
sampling settings, seed); the API key is a header and never part of it. An entry is written atomically
once a 200 answer with a readable body arrives, so a stop keeps everything received; an unreadable entry
(a damaged file) counts as absent and is asked again.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Mapping, Optional

from tt_host.fsutil import make_private_dir, write_json_atomic


def canonical(data: Any) -> str:
    return json.dumps(data, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def request_hash(url: str, body: Mapping[str, Any]) -> str:
    return hashlib.sha256(canonical({"url": url, "body": body}).encode("utf-8")).hexdigest()


class RequestCache:
    """`<folder>/<hash[:2]>/<hash>.json` holding {"url", "request", "response"}."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)

    def path(self, key: str) -> Path:
        return self.folder / key[:2] / f"{key}.json"

    def get(self, key: str) -> Optional[dict[str, Any]]:
        try:
            entry = json.loads(self.path(key).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        response = entry.get("response") if isinstance(entry, dict) else None
        return response if isinstance(response, dict) else None

    def put(self, key: str, url: str, body: Mapping[str, Any], response: Mapping[str, Any]) -> None:
        make_private_dir(self.path(key).parent)
        write_json_atomic(self.path(key), {"url": url, "request": dict(body), "response": dict(response)})
