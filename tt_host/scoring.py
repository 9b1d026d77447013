"""Scoring predictions against references on the host: exact match, JSON-field match, token F1.

Engines only ever see prompts; the host joins their predictions (by row id) to
the references it kept back and scores them here.

- exact_match: 1 when the normalized texts are equal (NFKC, case-folded,
  whitespace collapsed, surrounding whitespace and punctuation stripped).
- json_field_match: for references that are JSON objects, the fraction of
  their top-level fields the prediction (parsed as JSON) reproduces exactly;
  a prediction that is not a JSON object scores 0. Absent when no reference is JSON.
- token_f1: SQuAD-style bag-of-words F1 over normalized word tokens.
"""

from __future__ import annotations

import json
import re
import string
import unicodedata
from collections import Counter
from typing import Any, Optional

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
    except (json.JSONDecodeError, TypeError):
        return None
    return value if isinstance(value, dict) else None


def json_field_match(prediction: str, reference: str) -> Optional[float]:
    ref = _json_object(reference)
    if not ref:
        return None
    pred = _json_object(prediction.strip()) or {}
    return sum(1.0 for key, value in ref.items() if key in pred and pred[key] == value) / len(ref)


def score(predictions: dict[str, str], references: dict[str, str], prefix: str) -> dict[str, Any]:
    """Metrics under `prefix` for the rows that were predicted (ids unknown to the host are ignored)."""
    ids = [i for i in references if i in predictions]
    metrics: dict[str, Any] = {f"{prefix}.count": len(ids)}
    if not ids:
        return metrics
    metrics[f"{prefix}.exact_match"] = sum(exact_match(predictions[i], references[i]) for i in ids) / len(ids)
    metrics[f"{prefix}.token_f1"] = sum(token_f1(predictions[i], references[i]) for i in ids) / len(ids)
    fields = [s for s in (json_field_match(predictions[i], references[i]) for i in ids) if s is not None]
    if fields:
        metrics[f"{prefix}.json_field_match"] = sum(fields) / len(fields)
    return metrics


def read_predictions(path) -> dict[str, str]:
    """predictions.jsonl rows {"id", "prediction"}; a bad row is an error naming file and line."""
    out: dict[str, str] = {}
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{number}: invalid JSON: {exc.msg}") from None
            if not isinstance(row, dict) or not isinstance(row.get("id"), str) or not isinstance(row.get("prediction"), str):
                raise ValueError(f"{path}:{number}: expected {{\"id\": str, \"prediction\": str}}")
            out[row["id"]] = row["prediction"]
    return out
