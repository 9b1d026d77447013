"""What a grader is: a name, a kind, a score in [0, 1] of an answer against a reference, a pass, a description.

`Grader` is the one contract every kind implements (kinds: tt_stagekit.graders.kinds); `GraderError` is a
grader entry that cannot be built, with the place it came from (`evaluation.graders.2.pattern`), so the host
can exit 2 naming the field. Stdlib only.
"""

from __future__ import annotations

import json
import math
from typing import Any, Mapping

# Deepest JSON an answer may nest before it counts as not JSON (parsing it could exhaust the stack).
MAX_JSON_DEPTH = 64


class GraderError(ValueError):
    """A grader entry that cannot be built; `field` is its dotted place in the spec."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


class Grader:
    """Scores an answer against the prompt's reference output.

    `score(answer, reference)` is in [0, 1]; `passes(answer, reference)` is `score >= pass_at` (1.0 for the
    kinds that score 0 or 1); `describe()` is a JSON object naming the kind and its settings.
    """

    kind: str = ""
    pass_at: float = 1.0

    def __init__(self, name: str):
        self.name = name

    def score(self, answer: str, reference: str) -> float:
        raise NotImplementedError

    def passes(self, answer: str, reference: str) -> bool:
        return self.score(answer, reference) >= self.pass_at

    def settings(self) -> dict[str, Any]:
        """The kind's own settings, for describe()."""
        return {}

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, **self.settings(), "pass_at": self.pass_at}

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


def parse_json(text: str) -> tuple[bool, Any]:
    """(True, value) when `text` is JSON nested at most MAX_JSON_DEPTH deep and holds only finite numbers,
    else (False, None); never raises."""
    if not isinstance(text, str) or _depth(text) > MAX_JSON_DEPTH:
        return False, None
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        return False, None
    return True, value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _depth(text: str) -> int:
    deepest = level = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            level += 1
            deepest = max(deepest, level)
            if deepest > MAX_JSON_DEPTH:
                return deepest
        elif char in "]}":
            level -= 1
    return deepest


def json_type(value: Any) -> str:
    """The JSON Schema type name of a parsed JSON value (`integer` for whole numbers without a point)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def take(entry: Mapping[str, Any], field: str, key: str, kinds: tuple[type, ...], default: Any = None,
         required: bool = False) -> Any:
    """`entry[key]` checked against `kinds` (bool is never a number), or `default`; GraderError naming
    `field.key` otherwise."""
    if key not in entry:
        if required:
            raise GraderError(f"{field}.{key}", "is required")
        return default
    value = entry[key]
    numeric = any(k in (int, float) for k in kinds)
    if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
        names = " or ".join(_TYPE_NAMES.get(k, k.__name__) for k in kinds)
        raise GraderError(f"{field}.{key}", f"must be {names}, not {_TYPE_NAMES.get(type(value), type(value).__name__)}")
    if numeric and isinstance(value, float) and not math.isfinite(value):
        raise GraderError(f"{field}.{key}", "must be a finite number")
    return value


_TYPE_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "true or false", list: "a list",
               dict: "an object", type(None): "null"}


def pass_threshold(entry: Mapping[str, Any], field: str, default: float) -> float:
    """The optional `pass_at` of an entry: the score at which an answer passes, in (0, 1]."""
    value = take(entry, field, "pass_at", (int, float), default)
    if not 0 < value <= 1:
        raise GraderError(f"{field}.pass_at", f"must be above 0 and at most 1, not {value}")
    return float(value)


def unknown_keys(entry: Mapping[str, Any], field: str, allowed: set[str]) -> None:
    """Refuse keys a kind does not read (a misspelled `patern` would otherwise be ignored)."""
    extra = sorted(set(entry) - allowed - {"kind", "name"})
    if extra:
        raise GraderError(f"{field}.{extra[0]}", f"is not a setting of kind {entry.get('kind')!r} (its settings: "
                          f"{', '.join(sorted(allowed)) or 'none'})")
