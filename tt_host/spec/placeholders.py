"""The starter spec `tt init` writes, and finding the placeholders a user has not replaced yet.

Every placeholder is a string beginning with "TODO: ". A field counts as a
placeholder when its value is exactly one that `tt init` writes (for any
engine), so a spec about to-do lists may still say "TODO" in its own words.
`tt validate`, `tt run` and `tt doctor` refuse a spec that still holds one,
naming the field.
"""

from __future__ import annotations

from typing import Any, Iterator

MARK = "TODO: "


def starter_spec(engine: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": "TODO: a name for this behavior",
        "description": "",
        "engine": engine,
        "system_prompt": "TODO: describe the behavior you want",
        "guidelines": ["TODO: a guideline"],
        "constraints": [],
        "examples": [
            {"input": "TODO: an example input", "output": "TODO: the output you want"},
            {"input": "TODO: another example input", "output": "TODO: its output"},
        ],
    }
    if engine == "adapter":
        spec["base_model"] = "TODO: a local Hugging Face model folder or a hub id"
    if engine == "foundation":
        spec["foundation"] = {
            "corpus_path": "TODO: pretraining text: a .txt, .jsonl or .parquet file, or a folder of them",
        }
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


PLACEHOLDERS = frozenset(s for engine in ("adapter", "foundation") for s in _strings(starter_spec(engine))
                         if s.startswith(MARK))


def find_placeholders(value: Any, loc: str = "") -> Iterator[tuple[str, str]]:
    """(dotted field, placeholder) for every value still equal to a `tt init` placeholder."""
    if isinstance(value, str) and value.strip() in PLACEHOLDERS:
        yield loc or "(spec)", value.strip()
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from find_placeholders(item, f"{loc}.{key}" if loc else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from find_placeholders(item, f"{loc}.{index}" if loc else str(index))
