"""The JSON grader kinds: valid_json, json_fields, json_shape, json_values, json_schema.

An answer is parsed with tt_stagekit.graders.base.parse_json (nested at most 64 deep, finite numbers only,
surrounding whitespace stripped); one that does not parse scores 0 in every kind here.
"""

from __future__ import annotations

from typing import Any, Mapping

from tt_stagekit import scoring
from tt_stagekit.graders.base import Grader, GraderError, json_type, parse_json, take, unknown_keys
from tt_stagekit.graders.jsonschema import _same, check_schema, valid


def _coarse(value: Any) -> str:
    kind = json_type(value)
    return "number" if kind == "integer" else kind


class ValidJson(Grader):
    """1 when the answer parses as JSON; else 0 (the form of `synthesis.checks.valid_json`)."""

    kind = "valid_json"

    def score(self, answer: str, reference: str) -> float:
        return float(parse_json(answer.strip())[0])

    @classmethod
    def build(cls, entry: Mapping[str, Any], field: str, name: str) -> "ValidJson":
        unknown_keys(entry, field, set())
        return cls(name)


class JsonFields(Grader):
    """1 when the answer is a JSON object with every one of `fields` at its top level; else 0 (the form of
    `synthesis.checks.json_fields`)."""

    kind = "json_fields"

    def __init__(self, name: str, fields: list[str]):
        super().__init__(name)
        self.fields = list(fields)

    def score(self, answer: str, reference: str) -> float:
        ok, value = parse_json(answer.strip())
        return float(ok and isinstance(value, dict) and all(name in value for name in self.fields))

    def settings(self) -> dict[str, Any]:
        return {"fields": self.fields}

    @classmethod
    def build(cls, entry: Mapping[str, Any], field: str, name: str) -> "JsonFields":
        unknown_keys(entry, field, {"fields"})
        fields = take(entry, field, "fields", (list,), required=True)
        if not fields or not all(isinstance(f, str) and f for f in fields) or len(set(fields)) != len(fields):
            raise GraderError(f"{field}.fields", "must be a non-empty list of distinct, non-empty field names")
        return cls(name, fields)


class JsonShape(Grader):
    """The answer has the reference's JSON shape. For an object reference: the share of the keys of both
    whose value has the same type in each (integer and number count as one type), so a missing or an extra
    key costs; for any other reference: 1 when the answer's JSON type is the reference's. 0 when the answer
    is not JSON. Values are not compared (json_values does)."""

    kind = "json_shape"

    def score(self, answer: str, reference: str) -> float:
        ok, said = parse_json(answer.strip())
        known, wanted = parse_json(reference.strip())
        if not ok or not known:
            return 0.0
        if not isinstance(wanted, dict):
            return float(_coarse(said) == _coarse(wanted))
        if not isinstance(said, dict):
            return 0.0
        keys = wanted.keys() | said.keys()
        if not keys:
            return 1.0
        return sum(1 for key in keys if key in wanted and key in said
                   and _coarse(wanted[key]) == _coarse(said[key])) / len(keys)

    @classmethod
    def build(cls, entry: Mapping[str, Any], field: str, name: str) -> "JsonShape":
        unknown_keys(entry, field, set())
        return cls(name)


class JsonValues(Grader):
    """The answer's JSON values are the reference's: for a non-empty object reference, the share of its
    top-level fields the answer reproduces exactly (tt_stagekit.scoring.json_field_match); for any other
    reference, 1 when the parsed answer equals it (1 equals 1.0, true is not 1)."""

    kind = "json_values"

    def score(self, answer: str, reference: str) -> float:
        fields = scoring.json_field_match(answer, reference)
        if fields is not None:
            return fields
        ok, said = parse_json(answer.strip())
        known, wanted = parse_json(reference.strip())
        return float(ok and known and _same(said, wanted))

    @classmethod
    def build(cls, entry: Mapping[str, Any], field: str, name: str) -> "JsonValues":
        unknown_keys(entry, field, set())
        return cls(name)


class JsonSchema(Grader):
    """1 when the answer parses as JSON and satisfies `schema` (the subset in tt_stagekit.graders.jsonschema:
    type, properties, required, enum, items); else 0. The reference is not read."""

    kind = "json_schema"

    def __init__(self, name: str, schema: Mapping[str, Any]):
        super().__init__(name)
        self.schema = schema

    def score(self, answer: str, reference: str) -> float:
        ok, value = parse_json(answer.strip())
        return float(ok and valid(value, self.schema))

    def settings(self) -> dict[str, Any]:
        return {"schema": self.schema}

    @classmethod
    def build(cls, entry: Mapping[str, Any], field: str, name: str) -> "JsonSchema":
        unknown_keys(entry, field, {"schema"})
        schema = take(entry, field, "schema", (dict,), required=True)
        check_schema(schema, f"{field}.schema")
        return cls(name, schema)
