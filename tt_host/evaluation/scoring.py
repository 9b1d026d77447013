"""Scoring predictions against references on the host.

Engines only ever see prompts; the host joins their predictions (by row id) to
the references it kept back and scores them with the metric definitions in
`tt_stagekit.scoring` (exact match, JSON-field match, token F1), the same
code the engines use where the host cannot look (prebuilt test sets, RL
rewards), and, given the spec's graders (tt_stagekit.graders), with those
too (docs/evaluation.md, Graders): `PREFIX.graders.NAME` (each grader's mean
score), `PREFIX.grader_score` (the mean reward) and `PREFIX.grader_pass_rate`
(the share of rows every grader passes). A `regex` grader's matches run in a
child process under a time limit (tt_host.synthesis.regexguard): a
prediction it cannot match in time scores 0.
"""

from __future__ import annotations

import json
import threading
from contextlib import contextmanager
from typing import Any, Iterator, Optional, Sequence

from tt_stagekit.graders import GraderSet
from tt_stagekit.scoring import exact_match, json_field_match, normalize_answer, score_pairs, token_f1

REGEX_SECONDS = 5.0  # the most one regex grader's match of one prediction may take; over it, no match

__all__ = ["exact_match", "grader_metrics", "guarded", "json_field_match", "normalize_answer", "read_predictions",
           "score", "token_f1"]


def score(predictions: dict[str, str], references: dict[str, str], prefix: str,
          graders: Optional[GraderSet] = None) -> dict[str, Any]:
    """Metrics under `prefix` for the rows that were predicted (ids unknown to the host are ignored); with
    `graders`, the grader metrics beside them."""
    ids = [i for i in references if i in predictions]
    answers, wanted = [predictions[i] for i in ids], [references[i] for i in ids]
    metrics = score_pairs(answers, wanted, prefix)
    if graders is not None and ids:
        metrics.update(grader_metrics(graders, answers, wanted, prefix))
    return metrics


def grader_metrics(graders: GraderSet, answers: Sequence[str], references: Sequence[str],
                   prefix: str) -> dict[str, Any]:
    """The graders' metrics under `prefix` for aligned answers and references (at least one pair)."""
    count = len(references)
    with guarded(graders):
        rows = [graders.scores(answer, reference) for answer, reference in zip(answers, references)]
    # a grader passes at its pass_at (Grader.passes), read off the scores so no regex runs twice
    passed = sum(all(row[g.name] >= g.pass_at for g in graders.graders) for row in rows)
    metrics: dict[str, Any] = {f"{prefix}.graders.{g.name}": sum(r[g.name] for r in rows) / count
                               for g in graders.graders}
    metrics[f"{prefix}.grader_score"] = sum(sum(r.values()) / len(r) for r in rows) / count
    metrics[f"{prefix}.grader_pass_rate"] = passed / count
    return metrics


@contextmanager
def guarded(graders: GraderSet) -> Iterator[GraderSet]:
    """`graders` with every regex grader matching in a child process under a time limit (a timeout is no
    match), restored and the children ended on leaving."""
    from tt_host.synthesis.regexguard import RegexGuard

    swapped = []
    for grader in graders.graders:
        if grader.kind == "regex":
            guard = RegexGuard(grader.pattern, threading.Event(), REGEX_SECONDS)
            swapped.append((grader, grader.matcher, guard))
            grader.matcher = guard.matches
    try:
        yield graders
    finally:
        for grader, matcher, guard in swapped:
            grader.matcher = matcher
            guard.close()


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
