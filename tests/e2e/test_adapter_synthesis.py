"""Synthesis feeds the adapter: a tiny base model, LoRA on CPU, a loopback teacher (tests/teacher_stub.py)
that proposes new reviews and labels them correctly.

The same spec is run twice with the same hyperparameters: its own few examples alone teach nothing the
held-out examples show (candidate no better than the base model), while the teacher's rows (weight 2)
make the candidate beat the base model on those held-out examples, which stay the spec's own.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Iterator

import pytest

from adapter_support import NEGATIVE, POSITIVE, SUBJECTS, only_run_dir, shared_tiny_model, tt, write_spec
from teacher_stub import StubTeacher

from tt_host.spec.split import normalize_prompt

HYPERPARAMETERS = {"n_epochs": 1, "batch_size": 8, "learning_rate": 0.005, "checkpoint_interval_steps": 50}


def reviews(first: int, count: int) -> list[str]:
    rng = random.Random(first)
    out = []
    for index in range(first, first + count):
        adjective = rng.choice(POSITIVE if index % 2 == 0 else NEGATIVE)
        out.append(f"{rng.choice(SUBJECTS)} was {adjective} (review {index})")
    return out


def label(review: str) -> str:
    return "positive" if any(f" {word} " in f" {review} " for word in POSITIVE) else "negative"


def examples() -> list[dict[str, str]]:
    return [{"input": text, "output": label(text)} for text in reviews(0, 20)]


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("adapter-synthesis")


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Iterator[Path]:
    with shared_tiny_model(tmp_path_factory) as model:
        yield model


def run(home: Path, model: Path, name: str, **extra) -> dict:
    spec = write_spec(home / name, str(model), examples=examples(), hyperparameters=HYPERPARAMETERS, **extra)
    proc = tt(home, "run", spec)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    folder = only_run_dir(home / name)
    return {"dir": folder, "metrics": json.loads((folder / "report.json").read_text())["metrics"]}


def test_teacher_rows_make_the_adapter_beat_the_baseline_where_the_examples_alone_do_not(home, model):
    alone = run(home, model, "alone")
    assert alone["metrics"]["candidate.exact_match"] <= alone["metrics"]["baseline.exact_match"]
    with StubTeacher(propose=reviews, answer=label) as teacher:
        synthesis = {"teacher": {"base_url": teacher.url, "model": "stub-teacher"}, "rows": 150, "weight": 2.0,
                     "inputs_per_request": 25, "checks": {"regex": "positive|negative"}}
        taught = run(home, model, "taught", synthesis=synthesis)
    metrics = taught["metrics"]
    assert metrics["synthesize.kept"] == 150
    assert metrics["candidate.exact_match"] > metrics["baseline.exact_match"]
    assert metrics["eval.count"] == alone["metrics"]["eval.count"] >= 2  # the same held-out examples
    # training saw every synthetic row twice and never a held-out prompt
    trained = [json.loads(line) for line in (taught["dir"] / "prepare" / "train.jsonl").read_text().splitlines()]
    held = {normalize_prompt(p["messages"][1]["content"])
            for p in json.loads((taught["dir"] / "candidate" / "request.json").read_text())["eval_prompts"]}
    assert sum(1 for row in trained if row["id"].startswith("syn-")) == 300
    assert not {normalize_prompt(row["messages"][-2]["content"]) for row in trained} & held
