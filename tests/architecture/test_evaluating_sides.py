"""The evaluating sides (`baseline`, `sft`, `candidate`) are declared once, in `tt_stagekit.sides` (docs/plugins.md
"Evaluating sides"): the host and the engines name them through it (`tt_host.api` for a plugin module), and no
module of the host or of a shipped engine binds a name to one of them spelled out (`SFT = "sft"`,
`GATE_SIDES = ("baseline", "candidate")`), read from the source with `ast`. An annotated field's default
(the adapter's preference `reference: Literal["sft", "base"] = "sft"`, a setting's value) is not a side.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tt_stagekit import sides

REPO = Path(__file__).resolve().parents[2]
DECLARATION = Path("sdk") / "stagekit" / "tt_stagekit" / "sides.py"


def _spelled(value: ast.AST) -> bool:
    """A side's name as a literal, alone or in a tuple, list or set of literals."""
    items = value.elts if isinstance(value, (ast.Tuple, ast.List, ast.Set)) else [value]
    return (all(isinstance(item, ast.Constant) for item in items)
            and any(item.value in sides.EVALUATING_SIDES for item in items))


def side_declarations(root: Path) -> list[str]:
    """Each assignment of a spelled-out side to a name, as `file:line: code`, outside tt_stagekit/sides.py."""
    paths = sorted((root / "tt_host").rglob("*.py")) + sorted((root / "plugins").glob("*/tt_*/**/*.py"))
    paths += sorted((root / "sdk" / "stagekit" / "tt_stagekit").rglob("*.py"))
    found = []
    for path in paths:
        if path.relative_to(root) == DECLARATION:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Assign) and _spelled(node.value):  # a setting's default (`= "sft"`) is no side
                found.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_sides_are_declared_once():
    assert side_declarations(REPO) == []


def test_the_front_door_and_the_adapter_name_the_stagekits_sides():
    from tt_engine_adapter.formats import tuning
    from tt_host import api
    from tt_host.engine import GATE_SIDES

    assert (api.BASELINE_SIDE, api.SFT_SIDE, api.CANDIDATE_SIDE) == sides.EVALUATING_SIDES == api.EVALUATING_SIDES
    assert tuning.SFT == sides.SFT_SIDE and GATE_SIDES == (sides.BASELINE_SIDE, sides.CANDIDATE_SIDE)


def test_a_side_spelled_again_is_found(tmp_path):
    formats = tmp_path / "plugins" / "adapter" / "tt_engine_adapter" / "formats"
    formats.mkdir(parents=True)
    (formats / "tuning.py").write_text('SFT = "sft"\nTUNING = {"preference": ("reference",)}\n')
    (tmp_path / "tt_host").mkdir()
    (tmp_path / "tt_host" / "engine.py").write_text('GATE_SIDES = ("baseline", "candidate")\nOTHER = ("a", "b")\n')
    assert side_declarations(tmp_path) == ["tt_host/engine.py:1: GATE_SIDES = ('baseline', 'candidate')",
                                           "plugins/adapter/tt_engine_adapter/formats/tuning.py:1: SFT = 'sft'"]
