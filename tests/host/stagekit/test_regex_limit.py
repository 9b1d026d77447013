"""One time limit for every user-supplied regular expression (tt_stagekit.regexlimit), and the nesting rule's
newer shapes (tt_stagekit.graders.regexsafe): real child processes, real backtracking patterns."""

from __future__ import annotations

import time

import pytest

from tt_stagekit.graders import from_spec
from tt_stagekit.graders.kinds import MAX_TIMEOUTS
from tt_stagekit.graders.regexsafe import pathological
from tt_stagekit.regexlimit import LimitedRegex, MatchStopped

# passes the nesting rule (no unbounded repeat inside a repeat, no overlapping alternatives), yet backtracks for
# hours on any answer of eight characters or more: the distributions of the text over 640 optional dots
SLIPS_THE_RULE = "(?:.?.?.?.?.?.?.?.?){0,80}X"


@pytest.mark.parametrize("pattern", [r"(?:.|\s)*(?:positive|negative)(?:.|\s)*", r"(.*a){20}", r"(?:.|\n)+",
                                     r'"(?:\\.|[^"])*"', r"(?:\d\d|\w)*x"])
def test_the_nesting_rule_refuses_overlapping_alternatives_and_bounded_repeats_of_unbounded_parts(pattern):
    assert pathological(pattern), pattern
    with pytest.raises(ValueError, match="evaluation.graders.0.pattern"):
        from_spec({"examples": [], "evaluation": {"graders": [{"kind": "regex", "pattern": pattern}]}})


@pytest.mark.parametrize("pattern", [r"\s*(?:positive|negative)\s*", r"(?:yes|no)(?:, (?:yes|no))*", r"(?:a|\d)+",
                                     r"[A-Z]\w*", r"(?:x|y|z)*", SLIPS_THE_RULE])
def test_the_nesting_rule_lets_disjoint_alternatives_through(pattern):
    assert pathological(pattern) is None, pattern


def test_a_match_past_the_limit_ends_in_time_and_the_next_match_runs_in_a_new_child():
    limited = LimitedRegex(SLIPS_THE_RULE, seconds=1.0)
    started = time.monotonic()
    assert limited.fullmatch("positive sentiment") is None
    assert time.monotonic() - started < 5
    assert limited.child is None  # the stuck child was killed
    assert limited.fullmatch("X") is True and limited.fullmatch("Y") is False
    child = limited.child
    limited.close()
    assert child is not None and child.poll() is not None


def test_a_stop_ends_a_running_match_at_once():
    limited = LimitedRegex(SLIPS_THE_RULE, seconds=60.0, stopped=lambda: time.monotonic() > deadline)
    deadline = time.monotonic() + 0.5
    with pytest.raises(MatchStopped):
        limited.fullmatch("positive sentiment")
    assert time.monotonic() - deadline < 3 and limited.child is None


def test_the_child_dies_on_its_own_when_its_parent_is_gone():
    """The child arms its own alarm around each match: killed parent or not, it never runs past the limit."""
    limited = LimitedRegex(SLIPS_THE_RULE, seconds=1.0)
    child = limited._start()
    assert child.stdin is not None
    child.stdin.write(b'"positive sentiment"\n')
    child.stdin.flush()  # the parent never reads or kills: as if it had died mid-match
    started = time.monotonic()
    child.wait(timeout=30)
    assert child.returncode == -14 and time.monotonic() - started < 10  # SIGALRM, at the limit plus its margin
    limited.child = None


def test_a_grader_past_its_limit_scores_zero_is_reported_and_stops_matching_after_a_few():
    graders = from_spec({"examples": [], "evaluation": {"graders": [{"kind": "regex", "name": "slow",
                                                                     "pattern": SLIPS_THE_RULE}]}})
    (grader,) = graders.graders
    grader.limited.seconds = 0.5
    started = time.monotonic()
    rewards = [graders.reward("positive sentiment", "") for _ in range(MAX_TIMEOUTS + 5)]
    assert rewards == [0.0] * (MAX_TIMEOUTS + 5)
    assert time.monotonic() - started < MAX_TIMEOUTS * 0.5 + 5  # the later answers never reach a match
    assert graders.timeouts() == {"slow": MAX_TIMEOUTS + 5}
    assert "'slow' on 8 answer(s)" in graders.timeout_note() and "simplify it" in graders.timeout_note()
    graders.close()
    assert grader.limited.child is None
