"""The spec's `synthesis.checks` applied to one teacher answer: None when it passes, else the reason.

Reasons (the report counts drops by them): `empty`, `max_chars`, `valid_json`, `json_fields`, `regex`, in
the order they are tested.
"""

from __future__ import annotations

import json
import re
from typing import Optional

from tt_host.spec.synthesis import Checks


def failed_check(answer: str, checks: Checks) -> Optional[str]:
    if not answer.strip():
        return "empty"
    if checks.max_chars is not None and len(answer) > checks.max_chars:
        return "max_chars"
    if checks.valid_json or checks.json_fields:
        try:
            value = json.loads(answer)
        except ValueError:
            return "valid_json"
        if checks.json_fields and not (isinstance(value, dict) and all(name in value for name in checks.json_fields)):
            return "json_fields"
    if checks.regex is not None and re.fullmatch(checks.regex, answer, flags=re.DOTALL) is None:
        return "regex"
    return None
