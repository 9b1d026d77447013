"""`checks.regex` under a guard: refused at validate when it is pathological, run with a time limit.

A pattern comes from a spec someone else may have written, and Python's `re` backtracks: `(a+)+$` against
thirty `a`s and a `b` runs for hours, holding the GIL, where no signal handler runs. So:

- `tt_host.spec.regexcheck.pathological` (spec validation) refuses a repeat of something that itself
  repeats without a bound, `(a+)+`, `(a*)*`, `(.*a){20}`: the nested quantifiers behind catastrophic
  backtracking;
- `RegexGuard` runs every match in a child process (`python -I -S`, its own session so Ctrl-C reaches only
  tt) and waits for its answer in slices, checking the stage's `stop`: a stop (Ctrl-C, SIGTERM) kills the
  child and raises `Stopped` at once, and a match over `MATCH_SECONDS` kills it too and counts the answer
  as failing (`regex_timeout`). A new child starts for the next answer.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import time
import weakref
from typing import Optional

MATCH_SECONDS = 5.0
_CHILD = ("import json, re, sys\n"
          "pattern = re.compile(sys.argv[1], re.DOTALL)\n"
          "for line in sys.stdin:\n"
          "    sys.stdout.write('1\\n' if pattern.fullmatch(json.loads(line)) else '0\\n')\n"
          "    sys.stdout.flush()\n")


class RegexGuard:
    """`fullmatch(pattern, text, DOTALL)` in a child process: True, False, or None when it ran out of time."""

    def __init__(self, pattern: str, stop: threading.Event, seconds: float = MATCH_SECONDS):
        self.pattern, self.stop, self.seconds = pattern, stop, seconds
        self.child: Optional[subprocess.Popen] = None
        self._finalizer: Optional[weakref.finalize] = None

    def _start(self) -> subprocess.Popen:
        if self.child is None:
            self.child = subprocess.Popen([sys.executable, "-I", "-S", "-c", _CHILD, self.pattern],
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                          start_new_session=True)
            self._finalizer = weakref.finalize(self, _kill, self.child)
        return self.child

    def matches(self, text: str) -> Optional[bool]:
        from tt_host.synthesis.client import Stopped

        child = self._start()
        assert child.stdin is not None and child.stdout is not None
        try:
            child.stdin.write((json.dumps(text) + "\n").encode("utf-8"))
            child.stdin.flush()
        except BrokenPipeError:
            self.close()
            return None
        ends = time.monotonic() + self.seconds
        while True:
            if self.stop.is_set():
                self.close()
                raise Stopped
            left = ends - time.monotonic()
            if left <= 0:
                self.close()
                return None
            ready, _, _ = select.select([child.stdout], [], [], min(0.1, left))
            if ready:
                line = child.stdout.readline()
                if not line:
                    self.close()
                    return None
                return line.strip() == b"1"

    def close(self) -> None:
        if self.child is not None:
            _kill(self.child)
            self.child = None


def _kill(child: subprocess.Popen) -> None:
    if child.poll() is None:
        try:
            os.killpg(child.pid, 9)
        except OSError:
            child.kill()
    child.wait()
    for stream in (child.stdin, child.stdout):
        if stream is not None:
            try:
                stream.close()
            except OSError:
                pass
