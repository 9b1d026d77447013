"""`--set KEY=VALUE` (`tt run`, `tt pipeline run|plan`): a spec field overridden for one command.

KEY is the field's dotted path as validation errors name it (`echo.steps`, `hyperparameters.learning_rate`,
`examples.0.output`: a number steps into a list); VALUE is read as JSON when it parses as JSON (`3`, `1e-4`,
`true`, `null`, `[1, 2]`, `"3"` for the string), else taken as the string it is (`--set base_model=org/name`).
The overrides are applied, in the order given, to the spec as read, before anything else reads it (the engine,
a local-runner.json, legacy keys, validation), so the spec that is validated, frozen in the run's `spec.json`
and fingerprinted holds them: a resume with other `--set` values is a spec change like an edit. A malformed
argument, a key over MAX_KEY characters or nesting (its parts and its value's nesting) deeper than a spec
file may (MAX_DEPTH), a key that steps through a value that is not an object or list, or a list index out of
range is an error naming the `--set` argument; a validation error at an overridden field names it too. Nothing here
writes to disk.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any, Sequence, Union

from tt_host.spec.errors import SpecError
from tt_host.terminal import clean
from tt_stagekit.userinput import MAX_DEPTH, JSONInputError, loads

SEGMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,99}|0|[1-9][0-9]{0,8}")  # a field name, or a list index
MAX_ARGUMENT = 100_000  # characters in one --set argument
MAX_KEY = 1000  # characters in its KEY; and KEY's parts plus VALUE's nesting stay within a spec file's MAX_DEPTH


@dataclass(frozen=True)
class Override:
    """One `--set KEY=VALUE`: the argument as given, the key's path and the parsed value."""

    argument: str
    path: tuple[Union[str, int], ...]
    value: Any

    @property
    def key(self) -> str:
        return ".".join(str(part) for part in self.path)


def _loc(argument: str) -> str:
    shown = clean(argument)
    return f"--set {shown[:120]}{'…' if len(shown) > 120 else ''}"


def parse(arguments: Sequence[str]) -> tuple[list[Override], list[SpecError]]:
    """The overrides, or an error per argument that is not KEY=VALUE with a dotted KEY."""
    overrides, errors = [], []
    for argument in arguments:
        key, equals, text = argument.partition("=")
        if len(argument) > MAX_ARGUMENT:
            errors.append(SpecError(_loc(argument), f"longer than {MAX_ARGUMENT} characters; put the value in the "
                                                    "spec"))
            continue
        if not equals or not key:
            errors.append(SpecError(_loc(argument), "give KEY=VALUE, KEY a dotted spec field "
                                                    "(--set hyperparameters.learning_rate=1e-4)"))
            continue
        if len(key) > MAX_KEY:
            errors.append(SpecError(_loc(argument), f"the key is {len(key)} characters long, over {MAX_KEY}; no spec "
                                                    "field is named that long"))
            continue
        parts = key.split(".")
        if not all(SEGMENT.fullmatch(part) for part in parts):
            errors.append(SpecError(_loc(argument), f"{clean(key)!r} is not a dotted spec field: each part is a "
                                                    "field name (letters, digits, _ and -) or a list index "
                                                    "(examples.0.output)"))
            continue
        try:
            value = loads(text)
        except JSONInputError:
            value = text  # not JSON: the string as given
        if len(parts) + _depth(value) > MAX_DEPTH:
            errors.append(SpecError(_loc(argument), f"nests {len(parts) + _depth(value)} levels deep ({len(parts)} "
                                                    f"key parts and the value's own nesting); a spec nests at most "
                                                    f"{MAX_DEPTH} deep, as in a spec file"))
            continue
        overrides.append(Override(argument, tuple(int(p) if p.isdigit() else p for p in parts), value))
    return overrides, errors


def _depth(value: Any) -> int:
    """How many objects and lists nest in `value` (0 for a plain value; loads already refused deeper than
    MAX_DEPTH, so the recursion is bounded)."""
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


def _step_error(override: Override, depth: int, holder: Any) -> SpecError:
    where = ".".join(str(p) for p in override.path[:depth]) or "the spec"
    part = override.path[depth]
    if isinstance(holder, list):
        if not isinstance(part, int):
            why = f"`{where}` is a list: give an index (0 to {len(holder) - 1})" if holder else f"`{where}` is an empty list"
        else:
            why = f"`{where}` has {len(holder)} item(s); index {part} is out of range"
    else:
        why = f"`{where}` is {type(holder).__name__ if holder is not None else 'null'}, not an object"
    return SpecError(_loc(override.argument), f"cannot set `{override.key}`: {why}")


def apply(raw: dict[str, Any], overrides: Sequence[Override]) -> tuple[dict[str, Any], list[SpecError]]:
    """`raw` (a copy) with the overrides set; missing objects on the way are created (`{}`)."""
    if not overrides:
        return raw, []
    data: dict[str, Any] = copy.deepcopy(raw)
    errors: list[SpecError] = []
    for override in overrides:
        holder: Any = data
        for depth, part in enumerate(override.path):
            last = depth == len(override.path) - 1
            if isinstance(holder, dict) and isinstance(part, str):
                if last:
                    holder[part] = copy.deepcopy(override.value)
                elif part not in holder:
                    holder[part] = {}
            elif isinstance(holder, dict):  # a number naming an object's key
                part = str(part)
                if last:
                    holder[part] = copy.deepcopy(override.value)
                else:
                    holder.setdefault(part, {})
            elif isinstance(holder, list) and isinstance(part, int) and part < len(holder):
                if last:
                    holder[part] = copy.deepcopy(override.value)
            else:
                errors.append(_step_error(override, depth, holder))
                break
            if not last:
                holder = holder[part]
    return data, errors


def named(errors: Sequence[SpecError], overrides: Sequence[Override]) -> list[SpecError]:
    """The errors, each at or under an overridden field naming the `--set` argument that set it."""
    marked = []
    for error in errors:
        source = next((o for o in reversed(overrides)
                       if error.loc == o.key or error.loc.startswith(o.key + ".")), None)
        marked.append(SpecError(error.loc, f"{error.msg} (set by {_loc(source.argument)})") if source else error)
    return marked
