"""The synthetic rows on disk (`<run>/synthesize/rows.jsonl`) and how much training sees of them.

A row is `{"id": "syn-<16 hex>", "source": "synthetic", "request_sha256", "messages": [system, user,
assistant]}`; the id is the hash of the normalized prompt. `training_rows` applies `synthesis.weight`:
each row `floor(weight)` times, plus one more copy of a seeded share (`weight`'s fraction) of them, so a
weight of 0.5 trains on half of them once and 2.0 on each twice. Copies after the first get `~<n>` ids.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any, Sequence

from tt_stagekit.files import atomic_write_jsonl

ROWS_FILE = "rows.jsonl"
SOURCE = "synthetic"


def write_rows(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    atomic_write_jsonl(path, rows)


def read_rows(path: Path) -> list[dict[str, Any]]:
    rows = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        row = json.loads(line)
        if not isinstance(row, dict) or row.get("source") != SOURCE or not isinstance(row.get("messages"), list):
            raise ValueError(f"{path}:{number}: not a synthetic row; remove the synthesize stage's folder and resume")
        rows.append(row)
    return rows


def training_rows(rows: Sequence[dict[str, Any]], weight: float, seed: int) -> list[dict[str, Any]]:
    whole, fraction = int(math.floor(weight)), weight - math.floor(weight)
    extra = set(random.Random(f"weight:{seed}").sample(range(len(rows)), round(fraction * len(rows)))) if rows else set()
    out = []
    for index, row in enumerate(rows):
        copies = whole + (1 if index in extra else 0)
        for copy in range(copies):
            out.append(row if copy == 0 else {**row, "id": f"{row['id']}~{copy + 1}"})
    return out
