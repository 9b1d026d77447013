"""Who the teacher is: the URL and model name requests use, the key the user approved for it, and the
identity a stage fingerprint hashes (never the key).

The key is the user's, never the spec's: `TT_TEACHER_API_KEY` holds it and `TT_TEACHER_ORIGIN`
(`scheme://host[:port]`) names the one origin it may be sent to. It is sent only when the teacher's
`base_url` has exactly that origin (scheme, host and port; default ports filled in); otherwise no key is
sent and the run says why. A key approved for plain `http://` to a host that is not loopback is refused
(exit 2): it would cross the network in clear. `key_note` says, before the first request, where the key
came from or why none is sent.

A `model_id` teacher is a model the registry holds (`tt models list`), served by `tt serve` at `base_url`
(default http://127.0.0.1:8000/v1); its identity includes the registry entry's manifest digest, so new
weights under the same id are a new teacher.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping, Optional
from urllib.parse import urlsplit

from tt_host.errors import TTError
from tt_host.models.registry import get_model
from tt_host.spec.synthesis import Teacher
from tt_stagekit.addresses import is_loopback

KEY_VAR, ORIGIN_VAR = "TT_TEACHER_API_KEY", "TT_TEACHER_ORIGIN"
DEFAULT_PORTS = {"http": 80, "https": 443}


class TeacherSetupError(TTError):
    """The teacher cannot be used as the spec names it (exit 2: fix the spec or the environment)."""

    exit_code = 2


@dataclass(frozen=True)
class ResolvedTeacher:
    url: str
    model: str
    api_key: Optional[str]  # read from the environment at run time; kept out of every file and digest
    identity: dict[str, Any]
    key_note: str = "no key sent"  # where the key came from, or why none is sent (printed before any request)

    def __repr__(self) -> str:  # the key never shows in a traceback or a log line
        return f"ResolvedTeacher(url={self.url!r}, model={self.model!r})"


def teacher_identity(teacher: Teacher) -> dict[str, Any]:
    """What names the teacher in a fingerprint: its URL and model (and, for a registered model, its weights)."""
    identity: dict[str, Any] = {"url": teacher.url, "model": teacher.model_name}
    if teacher.model_id is not None:
        try:
            entry = get_model(teacher.model_id)
        except (OSError, ValueError):
            entry = None
        identity["model_id"] = teacher.model_id
        identity["manifest_sha256"] = (entry or {}).get("manifest_sha256")
    return identity


def origin(url: str) -> Optional[tuple[str, str, int]]:
    """(scheme, host, port) of an http(s) URL, default port filled in, host lower-cased; None when unreadable."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        return None
    return parts.scheme, parts.hostname.lower().rstrip("."), port or DEFAULT_PORTS[parts.scheme]


def shown_origin(found: tuple[str, str, int]) -> str:
    scheme, host, port = found
    return f"{scheme}://{'[' + host + ']' if ':' in host else host}:{port}"


def approved_key(url: str, environ: Mapping[str, str]) -> tuple[Optional[str], str]:
    """The key to send to `url` and a line saying where it came from (or why none is sent); raises
    TeacherSetupError for an unreadable TT_TEACHER_ORIGIN or a key that would cross the network in clear."""
    key = environ.get(KEY_VAR) or None
    if key is None:
        return None, f"no key sent ({KEY_VAR} is not set)"
    approved = environ.get(ORIGIN_VAR) or None
    if approved is None:
        return None, (f"no key sent: {KEY_VAR} is set but {ORIGIN_VAR}, the one origin it may go to, is not "
                      f"(export {ORIGIN_VAR}=scheme://host:port of the teacher)")
    wanted = origin(approved)
    if wanted is None or urlsplit(approved.strip()).path.strip("/") or "@" in approved:
        raise TeacherSetupError(f"{ORIGIN_VAR}: {approved!r} is not an origin; write scheme://host[:port] "
                                "(e.g. https://api.openai.com), nothing after it")
    target = origin(url)
    if target != wanted:
        return None, (f"no key sent: the teacher's origin {shown_origin(target) if target else url} is not the "
                      f"approved {ORIGIN_VAR} {shown_origin(wanted)}")
    if target[0] == "http" and not is_loopback(target[1]):
        raise TeacherSetupError(f"{ORIGIN_VAR}: refusing to send {KEY_VAR} over plain http:// to {target[1]}, "
                                "which is not loopback (anyone on the way could read it); use the teacher's "
                                "https:// address")
    return key, f"key from {KEY_VAR} (sent only to {ORIGIN_VAR} {shown_origin(wanted)})"


def resolve_teacher(teacher: Teacher, environ: Mapping[str, str] = os.environ) -> ResolvedTeacher:
    """The teacher ready to ask; refuses an unusable key setting or an unregistered model_id."""
    key, note = approved_key(teacher.url, environ)
    identity = teacher_identity(teacher)
    if teacher.model_id is not None and identity.get("manifest_sha256") is None:
        raise TeacherSetupError(f"synthesis.teacher.model_id: no registered model {teacher.model_id!r} "
                                "(`tt models list` shows them); serve one with `tt serve MODEL` and name it here")
    return ResolvedTeacher(teacher.url, teacher.model_name, key, identity, note)
