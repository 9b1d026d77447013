"""`StrictModel`, the base of every spec object (tt_host.spec.schema re-exports it); `Text`, a string that
must carry content, and `Name`, one that is also printed to terminals (no control characters)."""

from __future__ import annotations

import unicodedata
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict

from tt_host.terminal import UNSAFE


def not_blank(value: str) -> str:
    """Refuse a string that is empty or only whitespace after trimming (the error names the field)."""
    if isinstance(value, str) and not value.strip():
        raise ValueError("is blank (only spaces, tabs or newlines); write the text it must hold")
    return value


def no_control(value: str) -> str:
    """Refuse control characters (escape sequences, newlines, DEL, C1) and the bidi controls (a right-to-left
    override makes `exe.txt` read `txt.exe`): a name is printed to terminals. tt's one rule
    (tt_host.terminal.UNSAFE), plus tab and newline, which a one-line name cannot hold either."""
    for index, char in enumerate(value):
        if char in "\t\n" or UNSAFE.match(char):
            what = "control character" if unicodedata.category(char) == "Cc" else "bidi control"
            raise ValueError(f"holds the {what} {char!r} (U+{ord(char):04X}) at position {index}; a name is "
                             "printed on terminals, where it would act on the text around it: remove it")
    return value


# A text field that must carry content: blank after trimming is refused, naming the field (issue 30, item 8).
Text = Annotated[str, AfterValidator(not_blank)]
# A name shown to people (the spec's name): content, and no control characters.
Name = Annotated[str, AfterValidator(not_blank), AfterValidator(no_control)]


class StrictModel(BaseModel):
    """Base for every spec object: unknown keys are errors, values are never converted.

    Strict: `"4"`, `4.0` and `true` are not integers (an integer is still a valid float), a number is not
    a string; `allow_inf_nan=False`: infinities and NaN (JSON `Infinity`, `NaN`, `1e999`) are not numbers.
    Engines' spec blocks inherit both.
    """

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True)
