"""The synthesis client against a hostile teacher (tests/hostile_teacher.py: a real HTTP server on loopback): each
attack ends within its deadline with a clear error, nothing it sent is cached, nothing it chose reaches the
terminal raw, and the key never follows a redirect (docs/synthesis.md "Failures")."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from hostile_teacher import HostileTeacher
from tt_host.synthesis.cache import RequestCache
from tt_host.synthesis.client import ClientSettings, TeacherClient, TeacherError

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 512}


def ask(url: str, tmp_path: Path, timeout: float = 2.0, retries: int = 0, key: str | None = None):
    """One request through the real client: (the error, seconds it took, the client)."""
    settings = ClientSettings(concurrency=1, timeout_seconds=timeout, max_retries=retries)
    client = TeacherClient(url, key, RequestCache(tmp_path / "cache"), settings, threading.Event())
    started = time.monotonic()
    with pytest.raises(TeacherError) as caught:
        client.complete([BODY])
    return str(caught.value), time.monotonic() - started, client


def cached(tmp_path: Path) -> list[Path]:
    return list((tmp_path / "cache").rglob("*.json")) if (tmp_path / "cache").exists() else []


@pytest.mark.parametrize("mode", ["trickle_body", "trickle_headers"])
def test_a_trickle_ends_at_the_one_deadline(tmp_path, mode):
    with HostileTeacher(mode) as teacher:
        error, seconds, _ = ask(teacher.url, tmp_path, timeout=2.0)
    assert "no complete answer within 2s (one deadline across connect, headers and body)" in error
    assert 2.0 <= seconds < 4.0, seconds  # the old per-read timeout let a byte a second hold it for ever
    assert cached(tmp_path) == []


def test_a_huge_body_is_a_bad_answer_read_only_to_its_cap_and_never_cached(tmp_path):
    with HostileTeacher("huge") as teacher:
        error, seconds, client = ask(teacher.url, tmp_path, timeout=30.0, retries=1)
        sent = teacher.sent_bytes
    assert f"the answer is larger than {64 * 1024 + 64 * 512} bytes" in error and "2 attempt(s)" in error
    assert client.spent.retries == {"too_large": 2}
    assert sent < 300 * 1024 * 1024 and seconds < 20  # the client hung up at the cap, twice
    assert cached(tmp_path) == []


def test_deeply_nested_json_is_a_clear_error(tmp_path):
    with HostileTeacher("deep") as teacher:
        error, _, client = ask(teacher.url, tmp_path)
    assert "the body is JSON nested deeper than 64 levels" in error and client.spent.retries == {"bad_response": 1}
    assert cached(tmp_path) == []


def test_retry_after_past_the_deadline_is_not_waited_for(tmp_path):
    with HostileTeacher("retry_after") as teacher:
        error, seconds, _ = ask(teacher.url, tmp_path, timeout=2.0, retries=5)
    assert "it asked to wait 300s more, past the deadline" in error and "HTTP 429" in error
    assert seconds < 2.0 and len(teacher.times) == 1


def test_a_429_loop_ends_by_the_overall_deadline(tmp_path):
    settings = ClientSettings(timeout_seconds=1.0, max_retries=3)
    with HostileTeacher("loop429") as teacher:
        error, seconds, _ = ask(teacher.url, tmp_path, timeout=1.0, retries=3)
    assert f"within this request's deadline of {settings.overall_seconds:g}s" in error
    assert len(teacher.times) == 4 and seconds <= settings.overall_seconds
    gaps = [round(b - a, 1) for a, b in zip(teacher.times, teacher.times[1:])]
    assert gaps[0] >= 0.5 and gaps[1] >= 1.0 and gaps[2] >= 2.0, gaps  # backoff 0.5, 1, 2


def test_a_redirect_is_never_followed_and_the_key_stays_home(tmp_path):
    with HostileTeacher("loop429") as elsewhere, HostileTeacher("redirect") as teacher:
        teacher.location = f"{elsewhere.url}/chat/completions"
        error, _, _ = ask(teacher.url, tmp_path, key="sk-approved-for-the-first-origin-only")
    assert f"answered HTTP 302, a redirect to {elsewhere.url}/chat/completions" in error
    assert "set synthesis.teacher.base_url to the final address" in error
    assert teacher.auth == ["Bearer sk-approved-for-the-first-origin-only"] and elsewhere.auth == []


def test_escape_sequences_in_an_error_body_never_reach_the_message(tmp_path):
    with HostileTeacher("escapes") as teacher:
        error, _, _ = ask(teacher.url, tmp_path)
    assert "answered HTTP 400" in error and "evil" in error and "red" in error
    assert not [char for char in error if ord(char) < 32 or 0x7F <= ord(char) < 0xA0 or char == "\u202e"]
