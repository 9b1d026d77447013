"""`checks.regex` under a guard: refused at validate when it is pathological, run with a time limit.

A pattern comes from a spec someone else may have written, and Python's `re` backtracks: `(a+)+$` against
thirty `a`s and a `b` runs for hours, holding the GIL, where no signal handler runs. So:

- `tt_host.spec.regexcheck.pathological` (spec validation) refuses a repeat of something that itself
  repeats without a bound, `(a+)+`, `(a*)*`, `(.*a){20}`, and overlapping alternatives under a star,
  `(?:.|\\s)*`: the shapes behind catastrophic backtracking;
- `RegexGuard` is the one time limit every user pattern runs under (tt_stagekit.regexlimit: each match in a
  child process, killed past `MATCH_SECONDS`, the answer counted as failing: `regex_timeout`), tied to the
  stage's `stop`: a stop (Ctrl-C, SIGTERM) kills the child and raises `Stopped` at once.
"""

from __future__ import annotations

import threading
from typing import Optional

from tt_stagekit.regexlimit import MATCH_SECONDS, LimitedRegex, MatchStopped

__all__ = ["MATCH_SECONDS", "RegexGuard"]


class RegexGuard(LimitedRegex):
    """`fullmatch(pattern, text, DOTALL)` in a child process: True, False, or None when it ran out of time."""

    def __init__(self, pattern: str, stop: threading.Event, seconds: float = MATCH_SECONDS):
        super().__init__(pattern, seconds, stop.is_set)
        self.stop = stop

    def matches(self, text: str) -> Optional[bool]:
        from tt_host.synthesis.client import Stopped

        try:
            return self.fullmatch(text)
        except MatchStopped:
            raise Stopped from None
