"""Scoring predictions against references on the host.

Engines only ever see prompts; the host joins their predictions (by row id) to
the references it kept back and scores them with the metric definitions in
`tt_stagekit.scoring` (exact match, JSON-field match, token F1), the same
code the engines use where the host cannot look (prebuilt test sets, RL
rewards).
"""

from __future__ import annotations

import json
from typing import Any

from tt_stagekit.scoring import exact_match, json_field_match, normalize_answer, score_pairs, token_f1

__all__ = ["exact_match", "json_field_match", "normalize_answer", "read_predictions", "score", "token_f1"]


def score(predictions: dict[str, str], references: dict[str, str], prefix: str) -> dict[str, Any]:
    """Metrics under `prefix` for the rows that were predicted (ids unknown to the host are ignored)."""
    ids = [i for i in references if i in predictions]
    return score_pairs([predictions[i] for i in ids], [references[i] for i in ids], prefix)


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
