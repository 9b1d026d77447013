"""The starter spec `tt init` writes, and finding the placeholders a user has not replaced yet.

Every placeholder is a string beginning with "TODO: ". A field counts as a
placeholder when its value is exactly one that `tt init` writes (for any
engine: the neutral fields here plus the engine's `Engine.starter` fields),
so a spec about to-do lists may still say "TODO" in its own words.
`tt validate`, `tt run` and `tt doctor` refuse a spec that still holds one,
naming the field.
"""

from __future__ import annotations

import json
from typing import Any, Iterator, Optional

from tt_host.engine import Engine

MARK = "TODO: "


def starter_spec(engine: Optional[Engine]) -> dict[str, Any]:
    """The neutral starter fields, then the engine's own (`Engine.starter`; none for None)."""
    spec: dict[str, Any] = {
        "name": "TODO: a name for this behavior",
        "description": "",
        "engine": engine.name if engine else "",
        "system_prompt": "TODO: describe the behavior you want",
        "guidelines": ["TODO: a guideline"],
        "constraints": [],
        "examples": [
            {"input": "TODO: an example input", "output": "TODO: the output you want"},
            {"input": "TODO: another example input", "output": "TODO: its output"},
        ],
    }
    if engine is not None:
        spec.update(json.loads(json.dumps(dict(engine.starter))))  # a deep copy: the record stays as declared
    return spec


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def placeholders(engine: Optional[Engine]) -> frozenset[str]:
    """Every placeholder `tt init` writes for `engine` (the neutral ones alone for None)."""
    return frozenset(s for s in _strings(starter_spec(engine)) if s.startswith(MARK))


def find_placeholders(value: Any, engine: Optional[Engine] = None, loc: str = "",
                      known: Optional[frozenset[str]] = None) -> Iterator[tuple[str, str]]:
    """(dotted field, placeholder) for every value still equal to a `tt init` placeholder of `engine`."""
    known = placeholders(engine) if known is None else known
    if isinstance(value, str) and value.strip() in known:
        yield loc or "(spec)", value.strip()
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from find_placeholders(item, engine, f"{loc}.{key}" if loc else str(key), known)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from find_placeholders(item, engine, f"{loc}.{index}" if loc else str(index), known)
