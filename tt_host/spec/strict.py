"""`StrictModel`, the base of every spec object (tt_host.spec.schema re-exports it)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """Base for every spec object: unknown keys are errors, values are never converted.

    Strict: `"4"`, `4.0` and `true` are not integers (an integer is still a valid float), a number is not
    a string; `allow_inf_nan=False`: infinities and NaN (JSON `Infinity`, `NaN`, `1e999`) are not numbers.
    Engines' spec blocks inherit both.
    """

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True)
