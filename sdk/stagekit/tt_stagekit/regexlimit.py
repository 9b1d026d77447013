"""One time limit for every user-supplied regular expression, wherever it runs (host, stages). Stdlib only.

Python's `re` backtracks and holds the GIL while it does: a pattern the nesting rule (graders.regexsafe) lets
through can still run for hours on a hostile answer, and no signal handler or thread can interrupt it. So a
user's pattern never runs in the caller's process: `LimitedRegex(pattern).fullmatch(text)` sends the text to
a child (`python -I -S`: nothing from the current folder, no site; its own session, so a Ctrl-C reaches only
the caller) and waits for its answer in slices of 0.1 s. It returns True or False, or None when the match ran
past `seconds`: the child is killed (and a new one starts for the next text). The child also arms
`signal.alarm` around each match, so it dies on its own when its parent is gone. `stopped()`, checked between
slices, raises `MatchStopped` at once (the host's stages pass their stop event).

Used by the `regex` grader (tt_stagekit.graders.kinds: every stage that scores answers, the GRPO probe and
rewards, derived preference pairs) and the host's synthesis `checks.regex` and evaluation scoring
(tt_host.synthesis.regexguard). A timeout is a failed match there: the answer scores 0 and is counted.
"""

from __future__ import annotations

import json
import math
import os
import select
import subprocess
import sys
import time
import weakref
from typing import Callable, Optional

MATCH_SECONDS = 5.0  # the most one match of one text may take
_CHILD = ("import json, re, signal, sys\n"
          "pattern = re.compile(sys.argv[1], re.DOTALL)\n"
          "alarm = int(sys.argv[2])\n"
          "for line in sys.stdin:\n"
          "    signal.alarm(alarm)\n"
          "    hit = pattern.fullmatch(json.loads(line))\n"
          "    signal.alarm(0)\n"
          "    sys.stdout.write('1\\n' if hit else '0\\n')\n"
          "    sys.stdout.flush()\n")


class MatchStopped(Exception):
    """`stopped()` turned true while a match was running (the child is killed)."""


class LimitedRegex:
    """`fullmatch(pattern, text, DOTALL)` in a child process: True, False, or None when it ran out of time."""

    def __init__(self, pattern: str, seconds: float = MATCH_SECONDS, stopped: Callable[[], bool] = lambda: False):
        self.pattern, self.seconds, self.stopped = pattern, seconds, stopped
        self.child: Optional[subprocess.Popen] = None
        self._finalizer: Optional[weakref.finalize] = None

    def _start(self) -> subprocess.Popen:
        if self.child is None:
            alarm = str(math.ceil(self.seconds) + 2)  # the child's own limit, should its parent be gone
            self.child = subprocess.Popen([sys.executable, "-I", "-S", "-c", _CHILD, self.pattern, alarm],
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                          start_new_session=True)
            self._finalizer = weakref.finalize(self, _kill, self.child)
        return self.child

    def fullmatch(self, text: str) -> Optional[bool]:
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
            if self.stopped():
                self.close()
                raise MatchStopped
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
