"""The graders a spec gets when it names none (`evaluation.graders` absent), from its examples' outputs.

The first rule that holds decides, in this order:

1. label: the normalised outputs (tt_stagekit.scoring.normalize_answer) take 2 to `MAX_LABELS` (10)
   distinct values, each used by at least `MIN_USES` (2) examples, none longer than `MAX_LABEL_CHARS` (64)
   -> one `label` grader whose labels are those values (first spelling seen);
2. number: every output, stripped, is one number (`-3`, `1,204.5`, `2e-3`) -> one `number` grader
   (last number, absolute tolerance 1e-6);
3. JSON: every output parses as a JSON object or array -> `json_shape` (keys and types) and `json_values`
   (the fields reproduced), so a right shape with wrong values does not score full marks;
4. otherwise (and for a spec without examples): `exact` (normalised exact match) and `token_f1`.

Every example counts, the held-out ones too: the rules read only the form of the outputs, and a label
set is the task's, not a leak of any prompt.
"""

from __future__ import annotations

from collections import Counter
from typing import Sequence

from tt_stagekit import scoring
from tt_stagekit.graders.base import Grader, parse_json
from tt_stagekit.graders.jsonkinds import JsonShape, JsonValues
from tt_stagekit.graders.kinds import Exact, Label, Number, TokenF1, is_number

MAX_LABELS = 10
MIN_USES = 2
MAX_LABEL_CHARS = 64


def derive(outputs: Sequence[str]) -> tuple[list[Grader], str]:
    """The derived graders for these reference outputs and the rule that chose them (`label`, `number`,
    `json`, `text`)."""
    if labels := _labels(outputs):
        return [Label("label", labels)], "label"
    if outputs and all(is_number(text) for text in outputs):
        return [Number("number")], "number"
    if outputs and all(_json_container(text) for text in outputs):
        return [JsonShape("json_shape"), JsonValues("json_values")], "json"
    return [Exact("exact"), TokenF1("token_f1")], "text"


def _labels(outputs: Sequence[str]) -> list[str]:
    counts = Counter(scoring.normalize_answer(text) for text in outputs)
    if not 2 <= len(counts) <= MAX_LABELS or min(counts.values()) < MIN_USES:
        return []
    if any(not label or len(label) > MAX_LABEL_CHARS for label in counts):
        return []
    spelling: dict[str, str] = {}
    for text in outputs:
        spelling.setdefault(scoring.normalize_answer(text), text.strip())
    return list(spelling.values())


def _json_container(text: str) -> bool:
    ok, value = parse_json(text.strip())
    return ok and isinstance(value, (dict, list))
