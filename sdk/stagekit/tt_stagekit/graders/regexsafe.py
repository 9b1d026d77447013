"""The rule that refuses a regular expression which could backtrack catastrophically: one definition, used by
the `regex` grader and by the host's `synthesis.checks.regex` (tt_host.spec.regexcheck re-exports it).

Python's `re` backtracks: a repeat of a part that itself repeats without a bound, `(a+)+`, `(a*)*`,
`(.*a){20}`, can run for hours on a hostile answer. Such nesting is refused (conservatively: `(?:x+y)+` is
refused too; a possessive outer repeat, `(?:x+y)++`, is accepted). So is a repeat of alternatives two of
which can start with the same character, `(?:.|\\s)*`, `(?:a|ab)+`: each such character can be matched two
ways, so a failing match tries 2^n of them (checked on a probe set of characters: ASCII and a few others).
Whatever slips the rule still runs under the time limit (tt_stagekit.regexlimit). Stdlib only.
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
            if op in _REPEATS and av[1] > 1 and (shared := _overlap(av[2])) is not None:
                return (f"repeats alternatives two of which can start with the same character ({shared!r}, like "
                        "(?:.|\\s)*), so each such character can be matched two ways and a failing match tries "
                        "exponentially many; use one character class ([\\s\\S]*, .*) or alternatives that start "
                        "differently, or make the repeat possessive")
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


_PROBES = [chr(c) for c in range(128)] + list("\u00a0\u00e9\u0661\u2003\u3000\u4e00\u00df\u212a\U0001f600")
_CATEGORIES = {name: re.compile(text) for name, text in (
    ("CATEGORY_DIGIT", r"\d"), ("CATEGORY_NOT_DIGIT", r"\D"), ("CATEGORY_SPACE", r"\s"),
    ("CATEGORY_NOT_SPACE", r"\S"), ("CATEGORY_WORD", r"\w"), ("CATEGORY_NOT_WORD", r"\W"))}


def _overlap(body) -> Optional[str]:
    """A character two alternatives of a branch at the top of a repeated body can both start with, or None."""
    for op, av in body:
        if op is sre_parse.SUBPATTERN:
            return _overlap(av[3])
        if op is sre_parse.BRANCH:
            for ch in _PROBES:
                if sum(_starts(alternative, ch) for alternative in av[1]) > 1:
                    return ch
        return None
    return None


def _starts(items, ch: str) -> bool:
    """Whether `items` (a parsed sequence) can match starting with `ch` (conservative: True when unsure)."""
    for op, av in items:
        if op is sre_parse.AT:
            continue
        if op is sre_parse.LITERAL:
            return ord(ch) == av
        if op is sre_parse.NOT_LITERAL:
            return ord(ch) != av
        if op is sre_parse.ANY:
            return True
        if op is sre_parse.IN:
            return _in_set(av, ch)
        if op is sre_parse.SUBPATTERN:
            return _starts(av[3], ch) or (_empty(av[3]) and _starts(items[1:], ch))
        if op is sre_parse.BRANCH:
            return any(_starts(alt, ch) for alt in av[1])
        if op in _REPEATS or op is sre_parse.POSSESSIVE_REPEAT:
            if _starts(av[2], ch):
                return True
            if av[0] == 0:
                continue
            return False
        return True
    return False


def _empty(items) -> bool:
    return all(op is sre_parse.AT or (op in _REPEATS and av[0] == 0) for op, av in items)


def _in_set(av, ch: str) -> bool:
    negate, hit = False, False
    for op, value in av:
        if op is sre_parse.NEGATE:
            negate = True
        elif op is sre_parse.LITERAL:
            hit = hit or ord(ch) == value
        elif op is sre_parse.RANGE:
            hit = hit or value[0] <= ord(ch) <= value[1]
        elif op is sre_parse.CATEGORY:
            pattern = _CATEGORIES.get(str(value))
            hit = hit or pattern is None or pattern.fullmatch(ch) is not None
        else:
            hit = True
    return hit != negate
