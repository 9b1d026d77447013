"""Test data shared by the engine's own tests (plugins/foundation/tests) and the end-to-end tests (tests/e2e).

Stdlib only: the end-to-end tests import it in tt's environment, which has no torch.
"""

from __future__ import annotations

import json
import random
from pathlib import Path


def write_corpus(path: Path, seed: int = 1, rows: int = 400) -> Path:
    """A JSONL corpus of `rows` seeded sums ("3 plus 4 is 7. What is 3 plus 4? 7"): tiny models learn it fast."""
    r = random.Random(seed)
    with open(path, "w", encoding="utf-8") as handle:
        for _ in range(rows):
            a, b = r.randint(0, 40), r.randint(0, 40)
            handle.write(json.dumps({"text": f"{a} plus {b} is {a + b}. What is {a} plus {b}? {a + b}"}) + "\n")
    return path


def write_documents(path: Path, seed: int = 1, documents: int = 6, sums: tuple[int, int] = (14, 22)) -> Path:
    """A JSONL corpus of `documents` documents of a seeded number of sums each (in the `sums` range): long
    enough that BOS-aligned packing splits most into several rows, so only a few rows begin a document."""
    r = random.Random(seed)
    with open(path, "w", encoding="utf-8") as handle:
        for _ in range(documents):
            parts = []
            for _ in range(r.randint(*sums)):
                a, b = r.randint(0, 40), r.randint(0, 40)
                parts.append(f"{a} plus {b} is {a + b}.")
            handle.write(json.dumps({"text": " ".join(parts)}) + "\n")
    return path
