"""The docs say what the code declares: every settings table of docs/ lists each setting of its block with the
default of its declaration (formats/settings.py, tt_stagekit.launcher), and every JSON snippet of a block uses only
keys and values its declaration accepts. A snippet in the same section as its block's defaults table uses the
defaults, unless the line before it says its values are "not the defaults". The same holds for README.md and the
examples' READMEs, for every `--set KEY=VALUE` a document shows (the block or setting it names, the value), and
for every shipped example spec (examples/**/tunedtensor.json: its keys and blocks as the schema accepts them).
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any, Optional

import pytest

from tt_engine_adapter.formats import settings as adapter
from tt_engine_foundation.formats import settings as foundation
from tt_host.api import BehaviorSpec
from tt_stagekit.launcher import DistributedSettings
from tt_stagekit.settings import declared, default_of
from tt_stagekit.stageconfig import InvalidInput, parse

REPO = Path(__file__).resolve().parents[3]
DOCS = REPO / "docs"
READMES = [REPO / "README.md", *sorted((REPO / "examples").glob("*/README.md"))]
EXAMPLE_SPECS = sorted((REPO / "examples").rglob("tunedtensor.json"))

# (doc, the table's header line starts with, the block's settings, whether every setting must have a row).
TABLES = [
    ("adapter.md", "| key | default | bounds / meaning |", adapter.AdapterSettings, True),
    ("adapter.md", "| setting | default | what |", adapter.PreferenceSettings, True),
    ("adapter.md", "| tt `reinforcement` | TRL `GRPOConfig` |", adapter.ReinforcementSettings, True),
    ("foundation.md", "| field | default | bounds | meaning |", foundation.FoundationSettings, True),
    ("distributed.md", "| field | default | bounds | meaning |", DistributedSettings, True),
]
BLOCKS = {"adapter": {"hyperparameters": adapter.AdapterSettings, "preference": adapter.PreferenceSettings,
                      "reinforcement": adapter.ReinforcementSettings, "datasets": adapter.DatasetSplits},
          "foundation": {"foundation": foundation.FoundationSettings}}
TOP = {"adapter": adapter.AdapterSpecFields, "foundation": foundation.FoundationSpecFields}
NONE_WORDS = ("null", "unset", "none", "derived")
LABEL = "not the defaults"


def _sections(text: str) -> list[tuple[int, str]]:
    """(first line number, text) of each part of a Markdown file between headings."""
    starts = [0] + [m.start() for m in re.finditer(r"^#+ ", text, re.M)]
    return [(text[:a].count("\n") + 1, text[a:b]) for a, b in zip(starts, starts[1:] + [len(text)])]


def _table_rows(section: str, header: str) -> Optional[list[list[str]]]:
    lines = section.splitlines()
    for index, line in enumerate(lines):
        if line.startswith(header):
            rows = []
            for row in lines[index + 2:]:
                if not row.startswith("|"):
                    break
                rows.append([cell.strip() for cell in row.strip("|").split("|")])
            return rows
    return None


def _value(text: str, none: bool) -> Any:
    """A default as a table writes it: 3, 2e-4, 10M, `"all-linear"`, `cosine`, false, `[]`; with `none` (the
    declared default is None) also a cell that starts with null, unset, none or derived (what it falls back to)."""
    text = text.strip().strip("`").strip('"')
    word = re.match(r"[a-z]+", text)
    if none and word and word.group() in NONE_WORDS:
        return None
    if text in ("true", "false"):
        return text == "true"
    if text == "[]":
        return []
    scale = {"M": 1e6, "k": 1e3}.get(text[-1:], 1)
    try:
        return float(text[:-1] if scale != 1 else text) * scale
    except ValueError:
        return text


def _json(value: Any) -> Any:
    return json.loads(json.dumps(list(value) if isinstance(value, tuple) else value, default=str))


def _same(documented: str, declared_default: Any) -> bool:
    want = _json(declared_default)
    value = _value(documented, want is None)
    if isinstance(value, float) and isinstance(want, bool):
        return False
    return value == want


def table_problems(doc: str, header: str, settings: type, complete: bool) -> list[str]:
    text = (DOCS / doc).read_text(encoding="utf-8")
    tables = [rows for _, section in _sections(text) if (rows := _table_rows(section, header)) is not None]
    if len(tables) != 1:
        return [f"{doc}: {len(tables)} tables start with {header!r} (expected 1)"]
    defaults = {field.name: default_of(field) for field, _ in declared(settings)}
    problems, seen = [], set()
    for cells in tables[0]:
        keys = re.findall(r"`([a-z_0-9]+)`", cells[0].split("(")[0])
        if not keys:
            continue
        if "(" in cells[0]:  # "`steps` (50)", "`learning_rate` (5e-5, LoRA)": the default beside the name
            values = [cells[0].split("(", 1)[1].rsplit(")", 1)[0].split(", ")[0]]
        else:
            values = [v for v in re.split(r",\s*", cells[1])] if len(keys) > 1 else [cells[1]]
        if len(values) != len(keys):
            problems.append(f"{doc}: row {cells[0]!r}: {len(keys)} settings but {len(values)} defaults")
            continue
        for key, value in zip(keys, values):
            seen.add(key)
            if key not in defaults:
                problems.append(f"{doc}: `{key}` is no setting of {settings.__name__}")
            elif not _same(value, defaults[key]):
                problems.append(f"{doc}: `{key}` documented default {value!r}, declared {defaults[key]!r}")
    if complete:
        problems += [f"{doc}: {settings.__name__}.{name} has no row" for name in defaults if name not in seen]
    return problems


@pytest.mark.parametrize("doc,header,settings,complete", TABLES, ids=[f"{t[0]}:{t[2].__name__}" for t in TABLES])
def test_each_settings_table_states_the_declared_defaults(doc, header, settings, complete):
    assert table_problems(doc, header, settings, complete) == []


def _bounds_problems(settings: type, block: dict, where: str) -> list[str]:
    problems = []
    for field, meant in declared(settings):
        value = block.get(field.name)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        for name, limit in meant.bounds().items():
            ok = {"ge": value >= limit, "gt": value > limit, "le": value <= limit, "lt": value < limit}.get(name, True)
            if not ok:
                problems.append(f"{where}.{field.name}: {value} breaks {name} {limit}")
    return problems


def spec_problems(snippet: dict, where: str, tabled: set, before: str) -> list[str]:
    """A spec, or a fragment of one, checked against the schema: a whole spec's keys, each block's keys, values
    and bounds; a block beside its defaults table (`tabled`) must show the defaults unless `before` says not."""
    whole = "name" in snippet and bool({"engine", "examples", "base_model", "system_prompt"} & set(snippet))
    engine = snippet.get("engine", "foundation" if "foundation" in snippet else "adapter")
    if engine not in BLOCKS:
        return []
    problems = []
    if whole:
        known = set(BehaviorSpec.model_fields) | {f.name for f in dataclasses.fields(TOP[engine])}
        problems += [f"{where}: unknown key {key!r}" for key in snippet if key not in known]
    for key, settings in BLOCKS[engine].items():
        if not isinstance(snippet.get(key), dict):
            continue
        try:
            parse(settings, snippet[key], key)
        except InvalidInput as exc:
            problems.append(f"{where}: {exc}")
            continue
        problems += _bounds_problems(settings, snippet[key], f"{where}: {key}")
        if not whole and settings in tabled and LABEL not in before:
            defaults = {f.name: default_of(f) for f, _ in declared(settings)}
            problems += [f"{where}: {key}.{name}: {value!r} is not the default {defaults[name]!r} of the table "
                         f"beside it (label the snippet \"{LABEL}\" or show the defaults)"
                         for name, value in snippet[key].items() if _json(defaults[name]) != value]
    return problems


def set_problems(text: str, name: str) -> list[str]:
    """Each `--set KEY=VALUE` in the text's code blocks: a block (`reinforcement={...}`) or one of its settings
    (`hyperparameters.lora_rank=16`) as the adapter's declaration accepts it (the value read as JSON when it
    parses, as `tt run --set` reads it)."""
    problems = []
    found = [(block.start(1) + m.start(), m.group(1) or m.group(2))
             for block in re.finditer(r"^```[a-z]*\n(.*?)^```", text, re.S | re.M)
             for m in re.finditer(r"--set (?:'([^']*)'|(\S+))", block.group(1))]
    for offset, argument in found:
        where = f"{name}:{text[:offset].count(chr(10)) + 1}: --set {argument}"
        key, _, raw = argument.partition("=")
        if "$" in raw:
            continue  # the shell fills it in (a cluster recipe's $SLURM_NNODES): no value to check here
        try:
            value = json.loads(raw)
        except ValueError:
            value = raw
        block, _, setting = key.partition(".")
        if block not in BLOCKS["adapter"]:
            continue  # a top-level field (base_model, name): the spec's own validation
        fragment = {block: {setting: value} if setting else value}
        problems += spec_problems(fragment, where, set(), LABEL) if isinstance(fragment[block], dict) else \
            [f"{where}: the block {block} takes a JSON object"]
    return problems


def snippet_problems(doc: str | Path) -> list[str]:
    path = doc if isinstance(doc, Path) else DOCS / doc
    name = path.relative_to(REPO).as_posix() if path.is_relative_to(REPO) else path.name
    text = path.read_text(encoding="utf-8")
    problems = set_problems(text, name)
    for first_line, section in _sections(text):
        tabled = {settings for d, header, settings, _ in TABLES if d == path.name and _table_rows(section, header)}
        for match in re.finditer(r"```json\n(.*?)```", section, re.S):
            line = first_line + section[:match.start()].count("\n")
            body, snippet = match.group(1), None
            for candidate in (body, "{" + body + "}"):
                try:
                    snippet = json.loads(candidate)
                    break
                except ValueError:
                    continue
            if not isinstance(snippet, dict):
                continue
            before = (section[:match.start()].rstrip().splitlines()[-1:] or [""])[0]
            problems += spec_problems(snippet, f"{name}:{line}", tabled, before)
    return problems


@pytest.mark.parametrize("doc", sorted(p.name for p in DOCS.glob("*.md")))
def test_each_block_snippet_is_accepted_and_agrees_with_its_table(doc):
    assert snippet_problems(doc) == []


@pytest.mark.parametrize("readme", READMES, ids=[p.relative_to(REPO).as_posix() for p in READMES])
def test_each_readme_snippet_and_set_argument_is_accepted(readme):
    assert snippet_problems(readme) == []


@pytest.mark.parametrize("spec", EXAMPLE_SPECS, ids=[p.relative_to(REPO).as_posix() for p in EXAMPLE_SPECS])
def test_each_example_spec_uses_only_keys_and_values_the_schema_accepts(spec):
    assert spec_problems(json.loads(spec.read_text(encoding="utf-8")), spec.relative_to(REPO).as_posix(), set(),
                         LABEL) == []


def test_a_wrong_default_or_key_in_the_docs_is_found(tmp_path, monkeypatch):
    """The checks find a table row with another default, a snippet beside its table with a non-default value, an
    unknown key and a value out of bounds."""
    doc = tmp_path / "settings.md"
    doc.write_text("# A\n\n```json\n\"reinforcement\": {\"steps\": 30, \"kl_beta\": 0.0}\n```\n\n"
                   "| tt `reinforcement` | TRL `GRPOConfig` |\n|---|---|\n| `steps` (30) | `max_steps` |\n\n"
                   "# B\n\n```json\n\"hyperparameters\": {\"n_epochs\": 0, \"lora_rnak\": 8}\n```\n", encoding="utf-8")
    monkeypatch.setitem(globals(), "DOCS", tmp_path)
    monkeypatch.setitem(globals(), "TABLES", [("settings.md", "| tt `reinforcement` | TRL `GRPOConfig` |",
                                              adapter.ReinforcementSettings, False)])
    assert table_problems("settings.md", "| tt `reinforcement` | TRL `GRPOConfig` |", adapter.ReinforcementSettings,
                          False) == ["settings.md: `steps` documented default '30', declared 50"]
    found = snippet_problems("settings.md")
    assert any("reinforcement.steps: 30 is not the default 50" in p for p in found), found
    assert any("hyperparameters.lora_rnak: unknown to this engine's runtime" in p for p in found), found
    doc.write_text(doc.read_text().replace('"lora_rnak": 8', '"lora_rank": 8'), encoding="utf-8")
    assert any("hyperparameters.n_epochs: 0 breaks ge 1" in p for p in snippet_problems("settings.md"))
    doc.write_text("```bash\ntt run s.json --set 'reinforcement={\"stepz\": 5}' --set preference.beta=0\n```\n",
                   encoding="utf-8")
    found = snippet_problems("settings.md")
    assert any("--set reinforcement={\"stepz\": 5}" in p and "reinforcement.stepz" in p for p in found), found
    assert any("--set preference.beta=0" in p and "preference.beta: 0 breaks gt 0" in p for p in found), found
    spec = {"name": "s", "engine": "adapter", "examples": [], "hyperparamters": {}, "reinforcement": {"steps": 0}}
    found = spec_problems(spec, "examples/x/tunedtensor.json", set(), LABEL)
    assert any("unknown key 'hyperparamters'" in p for p in found) and any("steps: 0 breaks" in p for p in found)
