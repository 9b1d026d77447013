"""Item 5: bad adapter specs exit 2 from `tt validate` and `tt run`, naming the field or file and line,
and create nothing on disk. Host venv only (no engine environment needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adapter_support import hub_cache, sentiment_examples, tt

TF4_BASE = Path(__file__).resolve().parents[2] / "plugins" / "adapter" / "tests" / "fixtures" / "tiny-llama-transformers4"


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


def _no_answer_last(folder: Path) -> dict:
    row = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "positive"},
                        {"role": "user", "content": "again"}]}
    return {"datasets": {"train": _jsonl(folder / "train.jsonl", [_chat("fine", "positive"), row])}}


def _overlap(folder: Path) -> dict:
    train = _jsonl(folder / "train.jsonl", [_chat("The  Plot was GOOD", "positive"), _chat("meh", "negative")])
    validation = _jsonl(folder / "validation.jsonl", [_chat("new one", "negative"), _chat("the plot was good", "positive")])
    return {"datasets": {"train": train, "validation": validation}}


CASES = {
    "unknown hyperparameter": (lambda f: {"hyperparameters": {"n_epoch": 3}}, "hyperparameters.n_epoch", None),
    "revision neither commit nor branch": (lambda f: {"base_model": "org/some-model",
                                                      "base_model_revision": "main branch"},
                                           "base_model_revision", "branch or tag"),
    "row not ending with an answer": (_no_answer_last, "datasets.train", "train.jsonl:2"),
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


def test_doctor_finds_a_branch_through_the_cache_refs(tmp_path):
    commit = "0123456789abcdef0123456789abcdef01234567"
    snapshot = hub_cache(tmp_path, TF4_BASE, "tt-test/tiny", commit, ref="main")
    folder = tmp_path / "spec"
    spec = _spec(folder, base_model="tt-test/tiny", base_model_revision="main")
    proc = tt(tmp_path, "doctor", spec, "--json")
    checks = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}
    assert checks["base model"]["status"] == "ok" and str(snapshot) in checks["base model"]["detail"]
    assert commit in checks["base model revision"]["detail"]
    other = _spec(folder, base_model="tt-test/tiny", base_model_revision="v2")
    checks = {c["name"]: c for c in json.loads(tt(tmp_path, "doctor", other, "--json").stdout)["checks"]}
    assert checks["base model"]["status"] == "warn" and "tt-test/tiny@v2 is not in the cache" in checks["base model"]["detail"]
