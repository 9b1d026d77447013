"""Every teacher answer on disk, by the hash of its request: a repeated or resumed run asks nothing twice.

The key is sha256 over the canonical JSON of the endpoint URL and the request body (model, messages,
sampling settings, seed); the API key is a header and never part of it. An entry is written atomically
once a 200 answer with a readable body arrives, so a stop keeps everything received. The folder is
private (0700, tightened when found looser); it and its subfolders may not be symbolic links.

A cache may come with a project someone else shipped, so an entry is data to check, never to trust: it is
served only when it is a regular file of at most `MAX_ENTRY_BYTES`, parses (depth-limited), and its own
`url` and `request` hash to the key it is filed under and equal the request being asked. Anything else
(a damaged, planted or mismatched entry) counts as absent: the request is sent again, and `warn` names
the file.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from tt_host.errors import TTError
from tt_host.fsutil import PRIVATE_DIR, make_private_dir, write_json_atomic
from tt_host.synthesis.transport import loads

MAX_ENTRY_BYTES = 17 * 1024 * 1024  # the largest answer body (16 MiB) and its request


class CacheFolderError(TTError):
    """The cache folder cannot be used safely (a symbolic link, not a folder)."""

    exit_code = 2


def canonical(data: Any) -> str:
    return json.dumps(data, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def request_hash(url: str, body: Mapping[str, Any]) -> str:
    return hashlib.sha256(canonical({"url": url, "body": body}).encode("utf-8")).hexdigest()


class RequestCache:
    """`<folder>/<hash[:2]>/<hash>.json` holding {"url", "request", "response"}."""

    def __init__(self, folder: Path, warn: Callable[[str], None] = lambda line: None):
        self.folder = Path(folder)
        self.warn = warn
        self.checked = False

    def path(self, key: str) -> Path:
        return self.folder / key[:2] / f"{key}.json"

    def _check_folder(self) -> None:
        """Refuse a linked cache folder; tighten a readable one to 0700 (once)."""
        if self.checked:
            return
        _plain_folder(self.folder)
        if self.folder.is_dir() and stat.S_IMODE(self.folder.stat().st_mode) != PRIVATE_DIR:
            os.chmod(self.folder, PRIVATE_DIR)
        self.checked = True

    def get(self, key: str, url: str, body: Mapping[str, Any]) -> Optional[dict[str, Any]]:
        """The cached answer to `body` at `url`, or None (absent, or an entry that does not check out)."""
        self._check_folder()
        path = self.path(key)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
        except FileNotFoundError:
            return None
        except OSError as exc:
            self.warn(f"synthesis cache: {path} ignored ({exc.strerror or exc}); asking the teacher again")
            return None
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(handle.fileno())
            raw = handle.read(MAX_ENTRY_BYTES + 1) if stat.S_ISREG(info.st_mode) else None
        problem = self._problem(raw, key, url, body)
        if isinstance(problem, str):
            self.warn(f"synthesis cache: {path} ignored ({problem}); asking the teacher again")
            return None
        return problem

    @staticmethod
    def _problem(raw: Optional[bytes], key: str, url: str, body: Mapping[str, Any]) -> dict[str, Any] | str:
        """The entry's response, or why it is not served."""
        if raw is None:
            return "not a regular file"
        if len(raw) > MAX_ENTRY_BYTES:
            return f"larger than {MAX_ENTRY_BYTES} bytes"
        try:
            entry = loads(raw)
        except ValueError as exc:
            return f"unreadable: {str(exc)[:80]}"
        if not isinstance(entry, dict) or not isinstance(entry.get("response"), dict):
            return "not a cache entry"
        if not isinstance(entry.get("url"), str) or not isinstance(entry.get("request"), dict) \
                or request_hash(entry["url"], entry["request"]) != key:
            return "its request does not hash to its name"
        if entry["url"] != url or canonical(entry["request"]) != canonical(dict(body)):
            return "it answers another request"
        return entry["response"]

    def put(self, key: str, url: str, body: Mapping[str, Any], response: Mapping[str, Any]) -> None:
        self._check_folder()
        make_private_dir(self.folder)
        _plain_folder(self.path(key).parent)
        make_private_dir(self.path(key).parent)
        write_json_atomic(self.path(key), {"url": url, "request": dict(body), "response": dict(response)})


def _plain_folder(folder: Path) -> None:
    """Refuse a cache folder that is a link (writes would land wherever it points) or not a folder."""
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        raise CacheFolderError(f"{folder}: the synthesis cache must be a plain folder, not a link or a file; "
                               "remove it (tt makes it again)")
