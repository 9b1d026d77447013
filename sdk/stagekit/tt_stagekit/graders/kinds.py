"""The text grader kinds: exact, token_f1, label, regex, number, max_chars (JSON kinds: jsonkinds).

Each class's docstring says how it scores; `build(entry, field)` makes one from its `evaluation.graders`
entry, refusing a setting it does not read or a value of the wrong type (GraderError naming the field).
Normalisation is tt_stagekit.scoring's (the host's exact match and F1), never a second one.
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable, Mapping, Optional, Sequence

from tt_stagekit import scoring
from tt_stagekit.graders.base import Grader, GraderError, pass_threshold, take, unknown_keys
from tt_stagekit.graders.regexsafe import pathological
from tt_stagekit.regexlimit import LimitedRegex

MAX_TIMEOUTS = 3  # a regex grader's matches past the time limit before it scores every later answer 0

# A number as people write it: optional sign (not after a letter or digit, so the `-` of `5-3` is no sign),
# digits with optional thousands commas, an optional fraction and exponent.
NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?")


class Exact(Grader):
    """1 when answer and reference are equal after tt_stagekit.scoring.normalize_answer (NFKC, case folded,
    whitespace collapsed, surrounding punctuation stripped), else 0."""

    kind = "exact"

    def score(self, answer: str, reference: str) -> float:
        return scoring.exact_match(answer, reference)

    @classmethod
    def build(cls, entry: Mapping[str, Any], field: str, name: str) -> "Exact":
        unknown_keys(entry, field, set())
        return cls(name)


class TokenF1(Grader):
    """SQuAD-style bag-of-words F1 of the normalised words (tt_stagekit.scoring.token_f1); passes at
    `pass_at` (default 0.5)."""

    kind = "token_f1"

    def __init__(self, name: str, pass_at: float = 0.5):
        super().__init__(name)
        self.pass_at = pass_at

    def score(self, answer: str, reference: str) -> float:
        return scoring.token_f1(answer, reference)

    @classmethod
    def build(cls, entry: Mapping[str, Any], field: str, name: str) -> "TokenF1":
        unknown_keys(entry, field, {"pass_at"})
        return cls(name, pass_threshold(entry, field, 0.5))


class Label(Grader):
    """1 when the normalised answer is the normalised reference and, when `labels` are given, one of them;
    else 0. A reference outside `labels` fails the validate check."""

    kind = "label"

    def __init__(self, name: str, labels: Sequence[str] = ()):
        super().__init__(name)
        self.labels = tuple(labels)
        self._allowed = frozenset(scoring.normalize_answer(label) for label in self.labels)

    def score(self, answer: str, reference: str) -> float:
        said = scoring.normalize_answer(answer)
        if self._allowed and said not in self._allowed:
            return 0.0
        return float(said == scoring.normalize_answer(reference))

    def settings(self) -> dict[str, Any]:
        return {"labels": list(self.labels)} if self.labels else {}

    @classmethod
    def build(cls, entry: Mapping[str, Any], field: str, name: str) -> "Label":
        unknown_keys(entry, field, {"labels"})
        labels = take(entry, field, "labels", (list,), [])
        for index, label in enumerate(labels):
            if not isinstance(label, str) or not scoring.normalize_answer(label):
                raise GraderError(f"{field}.labels.{index}", "must be a non-empty string")
        if len({scoring.normalize_answer(label) for label in labels}) != len(labels):
            raise GraderError(f"{field}.labels", "a label is listed twice (after normalisation)")
        return cls(name, labels)


class Regex(Grader):
    """1 when the whole answer, surrounding whitespace stripped, matches `pattern` (re.fullmatch, DOTALL);
    else 0. The reference is not read. A pattern that could backtrack catastrophically is refused
    (tt_stagekit.graders.regexsafe), answers longer than `max_chars` (default 20000) fail unmatched, and every
    match runs under the one time limit (tt_stagekit.regexlimit, MATCH_SECONDS in a child process): an answer
    it cannot match in time scores 0 and is counted in `timeouts` (the stages report it); after MAX_TIMEOUTS
    such answers the grader matches no more and scores every later answer 0 (`skipped`), so a pattern that
    backtracks on the model's answers costs a stage at most MAX_TIMEOUTS limits, never hours."""

    kind = "regex"

    def __init__(self, name: str, pattern: str, max_chars: int = 20_000):
        super().__init__(name)
        self.pattern, self.max_chars = pattern, max_chars
        re.compile(pattern, re.DOTALL)
        self.limited = LimitedRegex(pattern)
        # fullmatch(text) -> True, False, or None when it ran out of time (a caller may swap in its own guard
        # tied to its stop event: tt_host.evaluation.scoring)
        self.matcher: Callable[[str], Optional[bool]] = self.limited.fullmatch
        self.timeouts = 0  # answers whose match ran past the limit
        self.skipped = 0  # answers scored 0 unmatched after MAX_TIMEOUTS: the pattern backtracks on them

    def score(self, answer: str, reference: str) -> float:
        text = answer.strip()
        if len(text) > self.max_chars:
            return 0.0
        if self.timeouts >= MAX_TIMEOUTS:  # 5 s per answer over thousands of answers would still hang the stage
            self.skipped += 1
            return 0.0
        hit = self.matcher(text)
        if hit is None:
            self.timeouts += 1
        return float(bool(hit))

    def settings(self) -> dict[str, Any]:
        return {"pattern": self.pattern, "max_chars": self.max_chars}

    @classmethod
    def build(cls, entry: Mapping[str, Any], field: str, name: str) -> "Regex":
        unknown_keys(entry, field, {"pattern", "max_chars"})
        pattern = take(entry, field, "pattern", (str,), required=True)
        if not pattern or len(pattern) > 2000:
            raise GraderError(f"{field}.pattern", "must be 1 to 2000 characters")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise GraderError(f"{field}.pattern", f"not a valid regular expression: {exc}") from None
        if problem := pathological(pattern):
            raise GraderError(f"{field}.pattern", problem)
        limit = take(entry, field, "max_chars", (int,), 20_000)
        if not 1 <= limit <= 1_000_000:
            raise GraderError(f"{field}.max_chars", "must be 1 to 1000000")
        return cls(name, pattern, limit)


def last_number(text: str) -> Optional[float]:
    """The last number written in `text` (thousands commas allowed), or None when there is none."""
    found = None
    for match in NUMBER.finditer(text):
        found = match.group(0)
    if found is None:
        return None
    value = float(found.replace(",", ""))
    return value if math.isfinite(value) else None


def is_number(text: str) -> bool:
    """The whole of `text` (stripped) is one number."""
    return NUMBER.fullmatch(text.strip()) is not None and last_number(text) is not None


class Number(Grader):
    """1 when the last number in the answer is within `tolerance` (absolute) or `relative` × |reference| of
    the last number in the reference; else 0 (also when either has no number). A reference without a number
    fails the validate check."""

    kind = "number"

    def __init__(self, name: str, tolerance: float = 1e-6, relative: float = 0.0):
        super().__init__(name)
        self.tolerance, self.relative = tolerance, relative

    def score(self, answer: str, reference: str) -> float:
        said, wanted = last_number(answer), last_number(reference)
        if said is None or wanted is None:
            return 0.0
        return float(abs(said - wanted) <= max(self.tolerance, self.relative * abs(wanted)))

    def settings(self) -> dict[str, Any]:
        return {"tolerance": self.tolerance, "relative": self.relative}

    @classmethod
    def build(cls, entry: Mapping[str, Any], field: str, name: str) -> "Number":
        unknown_keys(entry, field, {"tolerance", "relative"})
        tolerance = take(entry, field, "tolerance", (int, float), 1e-6)
        relative = take(entry, field, "relative", (int, float), 0.0)
        for key, value in (("tolerance", tolerance), ("relative", relative)):
            if value < 0:
                raise GraderError(f"{field}.{key}", f"must be 0 or more, not {value}")
        return cls(name, float(tolerance), float(relative))


class MaxChars(Grader):
    """1 when the answer, surrounding whitespace stripped, is at most `max` characters long; else 0."""

    kind = "max_chars"

    def __init__(self, name: str, limit: int):
        super().__init__(name)
        self.limit = limit

    def score(self, answer: str, reference: str) -> float:
        return float(len(answer.strip()) <= self.limit)

    def settings(self) -> dict[str, Any]:
        return {"max": self.limit}

    @classmethod
    def build(cls, entry: Mapping[str, Any], field: str, name: str) -> "MaxChars":
        unknown_keys(entry, field, {"max"})
        limit = take(entry, field, "max", (int,), required=True)
        if not 1 <= limit <= 1_000_000:
            raise GraderError(f"{field}.max", "must be 1 to 1000000")
        return cls(name, limit)
