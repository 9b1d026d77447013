"""The answer metrics, one definition for the host and every engine: exact match, JSON-field match, token F1.

The host scores held-out rows with these (tt_host.evaluation.scoring); engines use them
where the host cannot look: the adapter for prebuilt test sets, the foundation
RL reward. Stdlib only.

- exact_match: 1 when the normalized texts are equal (NFKC, case-folded,
  whitespace collapsed, surrounding whitespace and punctuation stripped).
- json_field_match: for references that are JSON objects, the fraction of
  their top-level fields the prediction (parsed as JSON) reproduces exactly;
  a prediction that is not a JSON object scores 0. None when the reference is
  not a non-empty JSON object.
- token_f1: SQuAD-style bag-of-words F1 over normalized word tokens.
"""

from __future__ import annotations

import json
import re
import string
import unicodedata
from collections import Counter
from typing import Any, Optional, Sequence

_EDGE = string.punctuation + " \t\n\r"


def normalize_answer(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).casefold()
    text = re.sub(r"\s+", " ", text).strip(_EDGE)
    return text


def exact_match(prediction: str, reference: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(reference))


def tokens(text: str) -> list[str]:
    return re.findall(r"\w+", normalize_answer(text))


def token_f1(prediction: str, reference: str) -> float:
    pred, ref = tokens(prediction), tokens(reference)
    if not pred and not ref:
        return 1.0
    common = sum((Counter(pred) & Counter(ref)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def _json_object(text: str) -> Optional[dict[str, Any]]:
    try:
        value = json.loads(text)
    except (ValueError, TypeError, RecursionError):  # RecursionError: a hostile answer nested thousands deep
        return None
    return value if isinstance(value, dict) else None


def json_field_match(prediction: str, reference: str) -> Optional[float]:
    ref = _json_object(reference)
    if not ref:
        return None
    pred = _json_object(prediction.strip()) or {}
    return sum(1.0 for key, value in ref.items() if key in pred and pred[key] == value) / len(ref)


def score_pairs(predictions: Sequence[str], references: Sequence[str], prefix: str) -> dict[str, Any]:
    """Metrics under `prefix` for aligned predictions and references; json_field_match only when some
    reference is a JSON object."""
    count = len(references)
    metrics: dict[str, Any] = {f"{prefix}.count": count}
    if not count:
        return metrics
    pairs = list(zip(predictions, references))
    metrics[f"{prefix}.exact_match"] = sum(exact_match(p, r) for p, r in pairs) / count
    metrics[f"{prefix}.token_f1"] = sum(token_f1(p, r) for p, r in pairs) / count
    fields = [m for m in (json_field_match(p, r) for p, r in pairs) if m is not None]
    if fields:
        metrics[f"{prefix}.json_field_match"] = sum(fields) / len(fields)
    return metrics
