"""The spec's `synthesis.checks` applied to one teacher answer: None when it passes, else the reason.

Reasons (the report counts drops by them): `empty`, `max_chars`, `valid_json`, `json_fields`, `regex`,
`regex_timeout`, in the order they are tested. JSON is parsed depth-limited (transport.loads: deep nesting
fails `valid_json`, never raises), and `regex` runs under its guard (regexguard.RegexGuard: a time limit,
and a stop that interrupts it).
"""

from __future__ import annotations

import threading
from typing import Optional

from tt_host.spec.synthesis import Checks
from tt_host.synthesis.regexguard import RegexGuard
from tt_host.synthesis.transport import loads


class AnswerChecks:
    """`checks` bound to the stage's stop; call it on an answer; `close` ends the regex child, if any."""

    def __init__(self, checks: Checks, stop: threading.Event):
        self.checks = checks
        self.guard = RegexGuard(checks.regex, stop) if checks.regex is not None else None

    def __call__(self, answer: str) -> Optional[str]:
        return failed_check(answer, self.checks, self.guard)

    def close(self) -> None:
        if self.guard is not None:
            self.guard.close()


def failed_check(answer: str, checks: Checks, guard: Optional[RegexGuard]) -> Optional[str]:
    if not answer.strip():
        return "empty"
    if checks.max_chars is not None and len(answer) > checks.max_chars:
        return "max_chars"
    if checks.valid_json or checks.json_fields:
        try:
            value = loads(answer)
        except ValueError:
            return "valid_json"
        if checks.json_fields and not (isinstance(value, dict) and all(name in value for name in checks.json_fields)):
            return "json_fields"
    if checks.regex is not None and guard is not None:
        found = guard.matches(answer)
        if found is None:
            return "regex_timeout"
        if not found:
            return "regex"
    return None
