"""The starter spec `tt init` writes, and finding the placeholders a user has not replaced yet.

Every placeholder is a string beginning with "TODO: ". A field counts as a
placeholder when its value is exactly one that `tt init` writes (for any
engine: the neutral fields here plus the engine's `Engine.starter` fields),
so a spec about to-do lists may still say "TODO" in its own words.
`tt validate`, `tt run` and `tt doctor` refuse a spec that still holds one,
naming the field. The Node CLI's scaffolds had no marker; their texts are
refused at the fields they were written to: the hosted `tt init`'s
(`NODE_SCAFFOLD`, `NODE_EXAMPLES`: the name, the system prompt, both example
pairs) and the local `tt init` of 0.13's (`NODE_LOCAL_SCAFFOLD`,
`NODE_LOCAL_EXAMPLES`: its system prompt and the four "Replace this with ..."
texts, which Node itself refused before training).
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


# What the Node CLI's hosted `tt init` wrote (src/commands/init.ts SCAFFOLD), field by field.
NODE_SCAFFOLD = {"name": "My Agent", "system_prompt": "You are a helpful assistant."}
NODE_EXAMPLES = ({"input": "Hello", "output": "Hi! How can I help you today?"},
                 {"input": "Summarize this update: The launch moved to Friday.",
                  "output": "The launch is now scheduled for Friday."})
# What the Node CLI 0.13's local `tt init` wrote (src/local-runtime/local-project.ts initLocalSpecFile).
NODE_LOCAL_SCAFFOLD = {"system_prompt": "Describe the behavior this local model should learn."}
NODE_LOCAL_EXAMPLES = frozenset({
    "Replace this with representative training input.", "Replace this with the expected training output.",
    "Replace this with a different validation input.", "Replace this with the expected validation output."})


def node_placeholders(spec: Any) -> Iterator[tuple[str, str]]:
    """(dotted field, text) for every Node scaffold text still in its field (a hosted example counts as a pair)."""
    if not isinstance(spec, dict):
        return
    for key, text in [*NODE_SCAFFOLD.items(), *NODE_LOCAL_SCAFFOLD.items()]:
        if isinstance(spec.get(key), str) and spec[key].strip() == text:
            yield key, text
    examples = spec.get("examples")
    for index, example in enumerate(examples if isinstance(examples, list) else []):
        if not isinstance(example, dict):
            continue
        for pair in NODE_EXAMPLES:
            if {k: example.get(k) for k in pair} == pair:
                yield f"examples.{index}.input", pair["input"]
        for side in ("input", "output"):
            if isinstance(example.get(side), str) and example[side].strip() in NODE_LOCAL_EXAMPLES:
                yield f"examples.{index}.{side}", example[side].strip()


def node_locs(found: dict[str, str], spec: Any) -> set[str]:
    """The fields of `found` that hold a Node scaffold text (for the error's wording)."""
    return {loc for loc, _ in node_placeholders(spec)} & set(found)
