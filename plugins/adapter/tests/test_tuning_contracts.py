"""Contracts of the adapter's tuning code, read from its source (no torch):

- one training-loop skeleton: only runtime/loop.py builds AdamW, saves, restores or picks a training checkpoint
  (itself or through distributed_checkpoint.py, its sharded half) and raises `Interrupted` after one (SFT, preference and reinforcement loops go through it);
- one adapter publisher: only runtime/adapter_out.py writes `tt-adapter.json` and an adapter's manifest, and a
  stage that registers an adapter (`Artifact(kind="adapter")`) calls `publish_adapter`.

Each rule is also run on a planted tree, where it must name the violation. And the `tuning` record a tuned
adapter's tt-adapter.json holds: every setting of the block, what the run made beside them, never over them.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from tt_engine_adapter.runtime.adapter_out import tuning_record
from tt_engine_adapter.runtime.config import PreferenceSettings, ReinforcementSettings

PACKAGE = Path(__file__).resolve().parents[1] / "tt_engine_adapter"

LOOP = "runtime/loop.py"
PUBLISHER = "runtime/adapter_out.py"
CHECKPOINT_CALLS = {"save", "restore", "latest"}  # of runtime/checkpoint.py: the loop's alone
# the skeleton: the loop and its two savers (distributed_checkpoint.py is the sharded half the loop calls)
SKELETON = (LOOP, "runtime/checkpoint.py", "runtime/distributed_checkpoint.py")
SAVERS = {"checkpoint", "distributed_checkpoint"}
# Interrupted beside the loop: evaluation stops between prompts (no optimizer, no checkpoint)
INTERRUPTED_ELSEWHERE = {"runtime/generate.py"}
# tt-adapter.json named beside its writer: the plugin declares it (ModelKind.info_file), export reads it, the
# test fixtures build adapters without a stage
INFO_FILE_READERS = {"plugin.py", "stages/export.py"}


def _modules(root: Path):
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith("testing/"):
            continue
        yield rel, ast.parse(path.read_text(encoding="utf-8"))


def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def _in_order(found: list[str]) -> list[str]:
    """By module, then line (ast.walk goes breadth first)."""
    def key(entry: str):
        rel, _, rest = entry.partition(":")
        line = rest.split(":", 1)[0]
        return rel, int(line) if line.isdigit() else 1 << 30
    return sorted(found, key=key)


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def loop_violations(root: Path) -> list[str]:
    out = []
    for rel, tree in _modules(root):
        if rel in SKELETON:
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            name, func = _name(node.func), node.func
            if name == "AdamW":
                out.append(f"{rel}:{node.lineno}: builds AdamW (runtime/loop.adamw)")
            elif (isinstance(func, ast.Attribute) and _name(func.value) in SAVERS and name in CHECKPOINT_CALLS):
                out.append(f"{rel}:{node.lineno}: {_name(func.value)}.{name} outside the loop skeleton "
                           "(runtime/loop.StepLoop)")
            elif name == "Interrupted" and rel not in INTERRUPTED_ELSEWHERE:
                out.append(f"{rel}:{node.lineno}: raises Interrupted (runtime/loop.StepLoop.run stops a loop)")
    return _in_order(out)


def publish_violations(root: Path) -> list[str]:
    out = []
    for rel, tree in _modules(root):
        if rel == PUBLISHER:
            continue
        docs = _docstrings(tree)
        registers = calls_publisher = False
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value == "tt-adapter.json" and id(node) not in docs \
                    and rel not in INFO_FILE_READERS:
                out.append(f"{rel}:{node.lineno}: names tt-adapter.json (runtime/adapter_out.publish_adapter writes it)")
            if not isinstance(node, ast.Call):
                continue
            name = _name(node.func)
            if name == "write_manifest" and len(node.args) > 1 and isinstance(node.args[1], ast.Constant) \
                    and node.args[1].value == "adapter":
                out.append(f"{rel}:{node.lineno}: writes an adapter manifest (runtime/adapter_out.publish_adapter)")
            calls_publisher |= name == "publish_adapter"
            registers |= name == "Artifact" and any(k.arg == "kind" and isinstance(k.value, ast.Constant)
                                                     and k.value.value == "adapter" for k in node.keywords)
        if registers and not calls_publisher:
            out.append(f"{rel}: registers an adapter without publish_adapter")
    return _in_order(out)


def test_one_loop_skeleton_and_one_adapter_publisher():
    assert (PACKAGE / LOOP).is_file() and (PACKAGE / PUBLISHER).is_file()
    assert loop_violations(PACKAGE) == []
    assert publish_violations(PACKAGE) == []


def test_the_rules_name_a_planted_violation(tmp_path):
    (tmp_path / "runtime").mkdir()
    (tmp_path / "stages").mkdir()
    (tmp_path / "runtime" / "myloop.py").write_text(
        '"""names tt-adapter.json in a docstring only"""\n'
        "def train(model, checkpoint, torch, Interrupted, distributed_checkpoint):\n"
        "    optimizer = torch.optim.AdamW(model.parameters())\n"
        "    checkpoint.restore('x', model, optimizer)\n"
        "    raise Interrupted('stop')\n"
        "    distributed_checkpoint.save('x', 1, model, optimizer, {})\n")
    (tmp_path / "stages" / "tune.py").write_text(
        "def main(tmp, manifest, Artifact):\n"
        "    (tmp / 'tt-adapter.json').write_text('{}')\n"
        "    manifest.write_manifest(tmp, 'adapter', {}, '')\n"
        "    return Artifact(kind='adapter', path=str(tmp))\n")
    assert loop_violations(tmp_path) == [
        "runtime/myloop.py:3: builds AdamW (runtime/loop.adamw)",
        "runtime/myloop.py:4: checkpoint.restore outside the loop skeleton (runtime/loop.StepLoop)",
        "runtime/myloop.py:5: raises Interrupted (runtime/loop.StepLoop.run stops a loop)",
        "runtime/myloop.py:6: distributed_checkpoint.save outside the loop skeleton (runtime/loop.StepLoop)",
    ]
    assert publish_violations(tmp_path) == [
        "stages/tune.py:2: names tt-adapter.json (runtime/adapter_out.publish_adapter writes it)",
        "stages/tune.py:3: writes an adapter manifest (runtime/adapter_out.publish_adapter)",
        "stages/tune.py: registers an adapter without publish_adapter",
    ]


def test_the_tuning_record_holds_every_setting_and_what_the_run_made_beside_them():
    record = tuning_record("reinforce", ReinforcementSettings(steps=7), 5, Path("/run/train/adapter"))
    assert record == {"stage": "reinforce", **dataclasses.asdict(ReinforcementSettings(steps=7)),
                      "completed_steps": 5, "from": "/run/train/adapter"}
    assert record["steps"] == 7  # the block's `steps` setting, not the steps the stage completed
    assert list(tuning_record("preference", PreferenceSettings(), 3, "x"))[:2] == ["stage", "loss"]

    @dataclasses.dataclass(frozen=True)
    class Clashing:
        completed_steps: int = 1

    with pytest.raises(ValueError, match="'completed_steps'"):
        tuning_record("preference", Clashing(), 1, "x")
