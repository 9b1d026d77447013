"""The field names a spec accepts at a place, for "did you mean" on an unknown key (host side).

`fields_at(model, loc)` walks a pydantic spec model along an error's location (`reinforcement.stepz`:
the `reinforcement` field's model) and returns the names (and aliases) of the fields accepted where the
unknown key stands; list indexes are stepped over, and a place that is no model gives no names.
"""

from __future__ import annotations

import typing
from typing import Any, Sequence

from pydantic import BaseModel


def _model_in(annotation: Any) -> Any:
    """The pydantic model an annotation holds (through Optional, Union, list and dict), else None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        if (found := _model_in(arg)) is not None:
            return found
    return None


def fields_at(model: Any, loc: Sequence[Any]) -> list[str]:
    for part in loc[:-1]:
        if not isinstance(part, str):
            continue
        field = (getattr(model, "model_fields", None) or {}).get(part)
        model = _model_in(field.annotation) if field is not None else None
        if model is None:
            return []
    fields = getattr(model, "model_fields", None) or {}
    return [*fields, *(f.alias for f in fields.values() if f.alias)]
