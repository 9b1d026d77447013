"""One key for "the same prompt" (tt_stagekit.sameness, docs/evaluation.md "The same prompt"): two examples
that differ only by an invisible character (U+200B, U+2060, U+034F, a variation selector), a look-alike letter
(Cyrillic, Greek capital or small), case, spacing or
a final period are twins, refused by `tt validate` and `tt run` naming both (exit 2, nothing created); an
adapter prebuilt row that is such a twin of an example is refused through `tt validate` naming file:line;
and the split itself did not move when the key grew stricter."""

from __future__ import annotations

import json

import pytest

from conftest import echo_spec, write_spec
from tt_host.spec.split import normalize_prompt, split_examples
from tt_stagekit import sameness

REVISION = "0123456789abcdef0123456789abcdef01234567"
ORIGINAL = "Capital of country 3?"
TWINS = {
    "zero width space U+200B": "Capital of\u200b country 3?",
    "word joiner U+2060": "Capital\u2060 of country 3?",
    "cyrillic a": "C\u0430pital of country 3?",
    "greek capital omicron": "Capital \u039ff country 3?",
    "final period": "Capital of country 3?.",
    "no final mark": "capital of  COUNTRY 3",
    "fullwidth and soft hyphen": "Ｃapital of coun\u00adtry 3?",
    "variation selectors U+FE0F, U+FE00, U+E0100": "Capital\ufe0f of\ufe00 country\U000e0100 3?",
    "combining grapheme joiner U+034F": "Capi\u034ftal of country 3?",
    "greek small look-alikes": "C\u03b1\u03c1\u03b9tal \u03bff c\u03bf\u03c5ntr\u03b3 3?",
}


@pytest.mark.parametrize("twin", list(TWINS.values()), ids=list(TWINS))
def test_the_key_calls_invisible_lookalike_and_final_punctuation_twins_one_prompt(twin):
    assert twin != ORIGINAL and normalize_prompt(twin) == normalize_prompt(ORIGINAL) == "capital of country 3"
    assert normalize_prompt is sameness.normalize_prompt


def test_the_key_keeps_what_differs_and_russian_text_stays_russian():
    assert normalize_prompt("Capital of country 3?") != normalize_prompt("Capital of country 8?")
    assert normalize_prompt("2+2=") != normalize_prompt("2+2")  # a symbol is not punctuation
    assert normalize_prompt("?!") == "?!"  # nothing but punctuation keeps it
    assert normalize_prompt("Столица страны?") != normalize_prompt("Столица страна?")
    assert normalize_prompt("STRASSE") == normalize_prompt("straße")  # case folded, not lower-cased


@pytest.mark.parametrize("twin", list(TWINS.values()), ids=list(TWINS))
def test_twin_examples_are_refused_by_validate_and_run_naming_both(tt, tmp_path, twin):
    spec = echo_spec()
    spec["examples"].append({"input": twin, "output": "City 3"})
    folder = tmp_path / "s"
    path = write_spec(folder, spec)
    for command in ("validate", "run"):
        code, out = tt.json(command, path)
        assert code == 2, out
        errors = {e["loc"]: e["msg"] for e in out["errors"]}
        assert errors["examples.10.input"].startswith("examples 3 and 10 have the same prompt"), out
    assert sorted(p.name for p in folder.iterdir()) == ["tunedtensor.json"]  # nothing created
    assert not (tmp_path / "tt-home").exists() or not any((tmp_path / "tt-home").rglob("run.json"))


def test_the_split_is_the_one_every_spec_had_before_the_key_grew_stricter():
    # the rule hashes the frozen rule text (tt_host.spec.split.rule_text), so an existing spec keeps its
    # held-out set: [0, 1, 9, 15, 18] is what main gave for these 20 prompts before the key changed (the
    # stricter key, which drops the "?", would hold out 1, 13 and 19)
    prompts = [f"Capital of country {i}?" for i in range(20)]
    flags = split_examples(prompts, "capitals")
    assert [i for i, held in enumerate(flags) if held] == [0, 1, 9, 15, 18]


def chat(user: str, answer: str) -> dict:
    return {"messages": [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]}


@pytest.mark.parametrize("twin", [TWINS["zero width space U+200B"], TWINS["cyrillic a"], TWINS["final period"]],
                         ids=["U+200B", "cyrillic", "final period"])
def test_an_adapter_prebuilt_row_twin_of_an_example_is_refused_by_tt_validate(tt, tmp_path, twin):
    folder = tmp_path / "s"
    folder.mkdir()
    rows = [chat("Say hi", "hi"), chat("Say bye", "bye"), chat(twin, "City 3")]
    (folder / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = {"name": "capitals", "engine": "adapter", "base_model": "org/tiny", "base_model_revision": REVISION,
            "system_prompt": "Answer with the capital city.", "datasets": {"train": "train.jsonl"},
            "examples": [{"input": f"Capital of country {i}?", "output": f"City {i}"} for i in range(10)]}
    code, out = tt.json("validate", write_spec(folder, spec))
    assert code == 2, out
    message = json.dumps(out, ensure_ascii=False)
    assert f"{folder / 'train.jsonl'}:3: prompt overlaps examples[3].input" in message, out
    assert sorted(p.name for p in folder.iterdir()) == ["train.jsonl", "tunedtensor.json"]
    (folder / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:2]))
    code, out = tt.json("validate", folder / "tunedtensor.json")
    assert code == 0, out
