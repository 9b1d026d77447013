"""Scores for prebuilt test sets, which the host cannot see (it scores its own held-out rows).

Same definitions as the host's `tt_host.scoring` (which the engine env cannot
import): exact match of normalized text (NFKC, case-folded, whitespace
collapsed, edge whitespace and punctuation stripped), JSON-field match when
the reference is a JSON object, SQuAD-style word-token F1.
"""

from __future__ import annotations

import json
import re
import string
import unicodedata
from collections import Counter
from typing import Optional, Sequence


_EDGE = string.punctuation + " \t\n\r"


def normalize(text: str) -> str:
    return re.sub(r"\s+", " ", unicodedata.normalize("NFKC", text).casefold()).strip(_EDGE)


def token_f1(prediction: str, reference: str) -> float:
    pred, ref = re.findall(r"\w+", normalize(prediction)), re.findall(r"\w+", normalize(reference))
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
        pred = json.loads(prediction.strip())
    except ValueError:
        pred = {}
    if not isinstance(pred, dict):
        pred = {}
    return sum(1 for key, value in ref.items() if key in pred and pred[key] == value) / len(ref)


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
