"""docs/plugins.md documents the stage contract from its one definition (tt_stagekit.contract): the request
table lists StageRequest's fields in request.json's order, the result table StageResult's fields, the exit
code table the contract's codes, and the `Serve` paragraph every ServeRequest field. A field added to the
contract without its line in the docs (or the reverse) fails here."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from tt_stagekit import contract

DOC = (Path(__file__).resolve().parents[2] / "docs" / "plugins.md").read_text(encoding="utf-8")


def table_after(heading: str) -> list[str]:
    """The first column of the table under the heading that starts with `heading`."""
    start = DOC.index(heading)
    rows = []
    for line in DOC[start:].splitlines()[1:]:
        if line.startswith("#"):
            break
        if line.startswith("| ") and not line.startswith("| field") and not line.startswith("| exit code"):
            rows.append(line.split("|")[1].strip().strip("`"))
    return rows


def test_the_request_table_is_stage_request_in_order():
    assert table_after("#### Request fields") == list(contract.request_fields())


def test_the_result_table_names_every_stage_result_field():
    named = [f.name for f in dataclasses.fields(contract.StageResult) if f.name != "extra"]
    assert sorted(table_after("#### Result fields")) == sorted(named)


def test_the_exit_code_table_is_the_contracts():
    assert [int(code) for code in table_after("#### Exit codes and signals")] == list(contract.EXIT_CODES)


def test_the_serve_paragraph_names_every_serve_request_field():
    paragraph = DOC[DOC.index("`Serve(module, hf_folders=False)`"):DOC.index("`tt_stagekit.contract.ServeRequest`")]
    named = set(re.findall(r"`([a-z_]+)`", paragraph))
    missing = [f.name for f in dataclasses.fields(contract.ServeRequest) if f.name not in named]
    assert missing == [], f"docs/plugins.md's Serve paragraph does not name {missing}"
