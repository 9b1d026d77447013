"""The rule that refuses a regular expression which could backtrack catastrophically: one definition, used by
the `regex` grader and by the host's `synthesis.checks.regex` (tt_host.spec.regexcheck re-exports it).

Python's `re` backtracks: a repeat of a part that itself repeats without a bound, `(a+)+`, `(a*)*`,
`(.*a){20}`, can run for hours on a hostile answer. Such nesting is refused (conservatively: `(?:x+y)+` is
refused too; a possessive outer repeat, `(?:x+y)++`, is accepted). Stdlib only.
"""

from __future__ import annotations

import re
import re._parser as sre_parse
from typing import Optional

_REPEATS = {sre_parse.MAX_REPEAT, sre_parse.MIN_REPEAT}


def pathological(pattern: str) -> Optional[str]:
    """Why `pattern` could backtrack catastrophically (a repeated group that repeats without bound), or None."""
    try:
        parsed = sre_parse.parse(pattern)
    except re.error:
        return None  # the compile check names it

    def unbounded_inside(items) -> bool:
        for op, av in items:
            if op in _REPEATS and av[1] == sre_parse.MAXREPEAT:
                return True
            if any(unbounded_inside(sub) for sub in _children(op, av)):
                return True
        return False

    def walk(items) -> Optional[str]:
        for op, av in items:
            if op in _REPEATS and av[1] > 1 and unbounded_inside(av[2]):
                return ("repeats a part that itself repeats without bound (like (a+)+ or (.*x){9}), which can "
                        "backtrack for hours on a hostile answer; write it without nesting (a+ for (a+)+) or make the outer "
                        "repeat possessive ((?:x+y)++)")
            for sub in _children(op, av):
                found = walk(sub)
                if found:
                    return found
        return None

    return walk(parsed)


def _children(op, av) -> list:
    if op in _REPEATS or op is sre_parse.POSSESSIVE_REPEAT:
        return [av[2]]
    if op is sre_parse.SUBPATTERN:
        return [av[3]]
    if op is sre_parse.BRANCH:
        return list(av[1])
    if op in (sre_parse.ASSERT, sre_parse.ASSERT_NOT):
        return [av[1]]
    if op is sre_parse.ATOMIC_GROUP:
        return [av]
    if op is sre_parse.GROUPREF_EXISTS:
        return [branch for branch in av[1:] if branch is not None]
    return []
