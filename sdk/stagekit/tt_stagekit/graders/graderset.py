"""`from_spec(spec) -> GraderSet`: the spec's graders, declared (`evaluation.graders`) or derived (derive).

A declared entry is an object with `kind` (one of KINDS), an optional `name` (default: the kind, then
`kind_2`, `kind_3` for repeats; `[a-z][a-z0-9_-]*`, at most 64, unique) and the kind's settings; anything
else is a GraderError naming the field (`evaluation.graders.1.pattern`, dotted as the host names fields). `GraderSet.reward` is the mean of
the graders' scores, `passes` needs every grader to pass, `check_references` runs every grader on the
reference outputs (the validate check). Stdlib only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Sequence

from tt_stagekit.graders.base import Grader, GraderError
from tt_stagekit.graders.derive import derive
from tt_stagekit.graders.jsonkinds import JsonFields, JsonSchema, JsonShape, JsonValues, ValidJson
from tt_stagekit.graders.kinds import MAX_TIMEOUTS, Exact, Label, MaxChars, Number, Regex, TokenF1

KINDS: dict[str, Callable[[Mapping[str, Any], str, str], Grader]] = {
    cls.kind: cls.build for cls in (Exact, TokenF1, Label, Regex, Number, MaxChars, ValidJson, JsonFields,
                                     JsonShape, JsonValues, JsonSchema)}
MAX_GRADERS = 32
_NAME = re.compile(r"[a-z][a-z0-9_-]{0,63}")
FIELD = "evaluation.graders"


@dataclass(frozen=True)
class ReferenceCheck:
    """One grader on the reference outputs: how many it passes, and the indices of those it fails."""

    name: str
    passed: int
    total: int
    failed: tuple[int, ...]

    @property
    def pass_rate(self) -> Optional[float]:
        return self.passed / self.total if self.total else None


class GraderSet:
    """The graders of one spec. `derived_by` is the derivation rule (`label`, `number`, `json`, `text`), or
    None when the spec declared them."""

    def __init__(self, graders: Sequence[Grader], derived_by: Optional[str] = None):
        if not graders:
            raise ValueError("a GraderSet needs at least one grader")
        self.graders: tuple[Grader, ...] = tuple(graders)
        self.derived_by = derived_by

    def scores(self, answer: str, reference: str) -> dict[str, float]:
        return {grader.name: grader.score(answer, reference) for grader in self.graders}

    def reward(self, answer: str, reference: str) -> float:
        """The mean of the graders' scores, in [0, 1]."""
        return sum(grader.score(answer, reference) for grader in self.graders) / len(self.graders)

    def passes(self, answer: str, reference: str) -> bool:
        return all(grader.passes(answer, reference) for grader in self.graders)

    def timeouts(self) -> dict[str, int]:
        """Per grader, the answers it scored 0 for want of time: matches past the time limit and the answers after
        the grader stopped matching (graders.kinds.MAX_TIMEOUTS); only graders with any."""
        return {g.name: g.timeouts + g.skipped for g in self.graders if getattr(g, "timeouts", 0)}

    def timeout_note(self) -> Optional[str]:
        """The line a stage logs when a grader hit its time limit (None when none did)."""
        counted = self.timeouts()
        if not counted:
            return None
        from tt_stagekit.regexlimit import MATCH_SECONDS

        named = ", ".join(f"{name!r} on {count} answer(s)" for name, count in counted.items())
        return (f"graders: a regex grader ran past its {MATCH_SECONDS:.0f} s match limit and scored 0 ({named}; "
                f"after {MAX_TIMEOUTS} such answers it matches no more): its pattern backtracks on these answers; "
                "simplify it (evaluation.graders)")

    def close(self) -> None:
        """End the graders' match children (a regex grader's; a new one starts if the set is used again)."""
        for grader in self.graders:
            limited = getattr(grader, "limited", None)
            if limited is not None:
                limited.close()

    def describe(self) -> list[dict[str, Any]]:
        return [grader.describe() for grader in self.graders]

    def check_references(self, references: Sequence[str]) -> list[ReferenceCheck]:
        """Every grader on every reference scored against itself: a reference output must pass."""
        checks = []
        for grader in self.graders:
            failed = tuple(index for index, ref in enumerate(references) if not grader.passes(ref, ref))
            checks.append(ReferenceCheck(grader.name, len(references) - len(failed), len(references), failed))
        return checks


def from_spec(spec: Mapping[str, Any]) -> GraderSet:
    """The spec's graders (spec: the spec as its JSON object, as in spec.json). GraderError on a bad entry."""
    evaluation = spec.get("evaluation") or {}
    declared = evaluation.get("graders") if isinstance(evaluation, Mapping) else None
    if declared is None:
        outputs = [example.get("output", "") for example in spec.get("examples") or []
                   if isinstance(example, Mapping) and isinstance(example.get("output"), str)]
        graders, rule = derive(outputs)
        return GraderSet(graders, rule)
    return GraderSet(build_entries(declared))


def build_entries(entries: Any, field: str = FIELD) -> list[Grader]:
    """The graders of a declared `evaluation.graders` list; GraderError naming the first bad field."""
    if not isinstance(entries, list):
        raise GraderError(field, "must be a list of grader objects")
    if not 1 <= len(entries) <= MAX_GRADERS:
        raise GraderError(field, f"must list 1 to {MAX_GRADERS} graders (leave it out to derive them from the "
                          "examples)")
    graders: list[Grader] = []
    names: set[str] = set()
    for index, entry in enumerate(entries):
        place = f"{field}.{index}"
        if not isinstance(entry, Mapping):
            raise GraderError(place, "must be an object with a `kind`")
        kind = entry.get("kind")
        if not isinstance(kind, str) or kind not in KINDS:
            raise GraderError(f"{place}.kind", f"must be one of {', '.join(KINDS)}, not {kind!r}")
        name = entry.get("name")
        if name is None:
            name = kind
            count = 2
            while name in names:
                name, count = f"{kind}_{count}", count + 1
        elif not isinstance(name, str) or not _NAME.fullmatch(name):
            raise GraderError(f"{place}.name", "must be a lowercase letter then up to 63 of a-z, 0-9, _ and -")
        if name in names:
            raise GraderError(f"{place}.name", f"{name!r} names two graders; give each its own name")
        names.add(name)
        graders.append(KINDS[kind](entry, place, name))
    return graders
