"""Item 5: bad adapter specs exit 2 from `tt validate` and `tt run`, naming the field or file and line,
and create nothing on disk. Host venv only (no engine environment needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adapter_support import sentiment_examples, tt


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def _jsonl(path: Path, rows: list) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path.name


def _chat(user: str, answer: str) -> dict:
    return {"messages": [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]}


def _spec(folder: Path, **changes) -> Path:
    (folder / "model").mkdir(parents=True, exist_ok=True)
    (folder / "model" / "config.json").write_text("{}")
    spec = {"name": "bad", "engine": "adapter", "base_model": "model", "examples": sentiment_examples()[:8]}
    for key, value in changes.items():
        spec[key] = value
    path = folder / "tunedtensor.json"
    path.write_text(json.dumps(spec))
    return path


def _two_users(folder: Path) -> dict:
    two = {"messages": [{"role": "user", "content": "hi"}, {"role": "user", "content": "again"},
                        {"role": "assistant", "content": "positive"}]}
    return {"datasets": {"train": _jsonl(folder / "train.jsonl", [_chat("fine", "positive"), two])}}


def _overlap(folder: Path) -> dict:
    train = _jsonl(folder / "train.jsonl", [_chat("The  Plot was GOOD", "positive"), _chat("meh", "negative")])
    validation = _jsonl(folder / "validation.jsonl", [_chat("new one", "negative"), _chat("the plot was good", "positive")])
    return {"datasets": {"train": train, "validation": validation}}


CASES = {
    "unknown hyperparameter": (lambda f: {"hyperparameters": {"n_epoch": 3}}, "hyperparameters.n_epoch", None),
    "revision not 40 hex": (lambda f: {"base_model": "org/some-model", "base_model_revision": "main"},
                            "base_model_revision", "40-hex"),
    "row with two user messages": (_two_users, "datasets.train", "train.jsonl:2"),
    "train/validation overlap": (_overlap, "datasets", "validation.jsonl:2"),
    "missing local model folder": (lambda f: {"base_model": "./no-such-model"}, "base_model", "no-such-model"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_exits_2_naming_the_place_and_creates_nothing(tmp_path, case):
    make, loc, detail = CASES[case]
    folder = tmp_path / "spec"
    folder.mkdir()
    spec = _spec(folder, **make(folder))
    before = _files(tmp_path)
    for command in (["validate", spec], ["run", spec]):
        proc = tt(tmp_path, *command, "--json")
        assert proc.returncode == 2, (command, proc.stdout, proc.stderr)
        errors = json.loads(proc.stdout)["errors"]
        assert any(e["loc"] == loc and (detail is None or detail in e["msg"]) for e in errors), errors
    human = tt(tmp_path, "run", spec)
    assert human.returncode == 2
    assert loc in human.stdout + human.stderr
    assert _files(tmp_path) == before


def test_valid_prebuilt_datasets_pass_validation(tmp_path):
    folder = tmp_path / "spec"
    folder.mkdir()
    train = _jsonl(folder / "train.jsonl", [_chat("a fresh review", "positive")])
    test = _jsonl(folder / "test.jsonl", [_chat("another review", "negative")])
    spec = _spec(folder, datasets={"train": train, "test": test})
    proc = tt(tmp_path, "validate", spec)
    assert proc.returncode == 0, proc.stdout + proc.stderr
