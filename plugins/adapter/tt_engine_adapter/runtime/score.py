"""Scores for prebuilt test sets, which the host cannot see (it scores its own held-out rows).

Same definitions as the host's scoring: normalized exact match (NFKC, trim,
collapsed whitespace, lower-case), JSON-field match when the reference is a
JSON object, and bag-of-tokens F1.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections import Counter
from typing import Optional, Sequence


def normalize(text: str) -> str:
    return re.sub(r"\s+", " ", unicodedata.normalize("NFKC", text)).strip().lower()


def token_f1(prediction: str, reference: str) -> float:
    pred, ref = normalize(prediction).split(), normalize(reference).split()
    if not pred and not ref:
        return 1.0
    common = sum((Counter(pred) & Counter(ref)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def json_field_match(prediction: str, reference: str) -> Optional[float]:
    try:
        ref = json.loads(reference)
    except ValueError:
        return None
    if not isinstance(ref, dict) or not ref:
        return None
    try:
        pred = json.loads(prediction)
    except ValueError:
        return 0.0
    if not isinstance(pred, dict):
        return 0.0
    return sum(1 for key, value in ref.items() if pred.get(key) == value) / len(ref)


def score(predictions: Sequence[str], references: Sequence[str], prefix: str) -> dict[str, float]:
    count = len(references)
    metrics = {f"{prefix}.count": count}
    if not count:
        return metrics
    metrics[f"{prefix}.exact_match"] = sum(normalize(p) == normalize(r) for p, r in zip(predictions, references)) / count
    metrics[f"{prefix}.token_f1"] = sum(token_f1(p, r) for p, r in zip(predictions, references)) / count
    fields = [m for m in (json_field_match(p, r) for p, r in zip(predictions, references)) if m is not None]
    if fields:
        metrics[f"{prefix}.json_field_match"] = sum(fields) / len(fields)
    return metrics
