"""A small JSON Schema subset, stdlib only: `type`, `properties`, `required`, `enum`, `items`.

`check_schema(schema, field)` refuses a schema using any other keyword, naming it and its place
(`evaluation.graders.0.schema.properties.age.minimum`), because a keyword tt silently ignored would pass
answers the user meant to fail. The annotations `title`, `description`, `$schema` and `$comment` are
accepted and ignored. `valid(value, schema)` is True when the parsed JSON value satisfies the schema.
`type` is a name or a list of names among null, boolean, integer, number, string, array, object; an
integer is a number without a fraction (1.0 is an integer, true is not).
"""

from __future__ import annotations

from typing import Any, Mapping

from tt_stagekit.graders.base import GraderError

TYPES = ("null", "boolean", "integer", "number", "string", "array", "object")
KEYWORDS = {"type", "properties", "required", "enum", "items"}
ANNOTATIONS = {"title", "description", "$schema", "$comment"}


def check_schema(schema: Any, field: str) -> None:
    if not isinstance(schema, Mapping):
        raise GraderError(field, "a schema must be a JSON object")
    for key in schema:
        if key not in KEYWORDS | ANNOTATIONS:
            raise GraderError(f"{field}.{key}", f"the JSON Schema keyword {key!r} is not implemented (tt implements "
                              f"{', '.join(sorted(KEYWORDS))}); remove it or use a regex grader")
    if "type" in schema:
        names = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not names or any(name not in TYPES for name in names):
            raise GraderError(f"{field}.type", f"must be one of {', '.join(TYPES)} or a non-empty list of them")
    if "properties" in schema:
        if not isinstance(schema["properties"], Mapping):
            raise GraderError(f"{field}.properties", "must be an object of schemas")
        for name, sub in schema["properties"].items():
            check_schema(sub, f"{field}.properties.{name}")
    if "required" in schema:
        required = schema["required"]
        if not isinstance(required, list) or not all(isinstance(name, str) for name in required):
            raise GraderError(f"{field}.required", "must be a list of property names")
    if "enum" in schema and (not isinstance(schema["enum"], list) or not schema["enum"]):
        raise GraderError(f"{field}.enum", "must be a non-empty list")
    if "items" in schema:
        check_schema(schema["items"], f"{field}.items")


def valid(value: Any, schema: Mapping[str, Any]) -> bool:
    if "type" in schema:
        names = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_is(value, name) for name in names):
            return False
    if "enum" in schema and not any(_same(value, option) for option in schema["enum"]):
        return False
    if isinstance(value, dict):
        if any(name not in value for name in schema.get("required", ())):
            return False
        for name, sub in schema.get("properties", {}).items():
            if name in value and not valid(value[name], sub):
                return False
    if isinstance(value, list) and "items" in schema:
        return all(valid(item, schema["items"]) for item in value)
    return True


def _is(value: Any, name: str) -> bool:
    if name == "null":
        return value is None
    if name == "boolean":
        return isinstance(value, bool)
    if name == "integer":
        return not isinstance(value, bool) and (isinstance(value, int) or isinstance(value, float) and value.is_integer())
    if name == "number":
        return not isinstance(value, bool) and isinstance(value, (int, float))
    if name == "string":
        return isinstance(value, str)
    if name == "array":
        return isinstance(value, list)
    return isinstance(value, dict)


def _same(a: Any, b: Any) -> bool:
    """JSON equality: true is not 1, 1 is 1.0."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b
