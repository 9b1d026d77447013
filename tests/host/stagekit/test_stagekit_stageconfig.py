"""tt_stagekit.stageconfig: a stage request parsed once into frozen dataclasses, a wrong value named by its field.

Stdlib only, so tested here; the engines' own dataclasses are pinned to their spec models in
test_stage_config_engines.py.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar, Literal, Mapping, Optional, Union

import pytest

from tt_stagekit import protocol as P
from tt_stagekit.stageconfig import StageRequest, parse, parse_request


@dataclasses.dataclass(frozen=True)
class Inner:
    rate: float = 0.5
    mode: Literal["a", "b"] = "a"
    names: Union[Literal["all"], tuple[str, ...]] = "all"


@dataclasses.dataclass(frozen=True)
class Outer:
    extra_keys: ClassVar[str] = "ignore"

    steps: int
    flag: bool = False
    limit: Optional[int] = None
    folder: Optional[Path] = None
    inner: Inner = dataclasses.field(default_factory=Inner)
    table: Mapping[str, int] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Request(StageRequest):
    spec: Outer


def test_values_arrive_typed_and_frozen():
    out = parse(Outer, {"steps": 3, "flag": True, "folder": "/data", "inner": {"rate": 1, "names": ["q", "v"]},
                        "table": {"x": 1}, "neutral": "ignored"}, "spec")
    assert out == Outer(steps=3, flag=True, folder=Path("/data"), inner=Inner(rate=1.0, names=("q", "v")),
                        table={"x": 1})
    assert isinstance(out.inner.rate, float)  # an int is widened to the declared float
    with pytest.raises(dataclasses.FrozenInstanceError):
        out.steps = 4  # type: ignore[misc]
    with pytest.raises(TypeError):
        out.table["x"] = 2  # type: ignore[index]
    assert parse(Outer, {"steps": 1}) == Outer(steps=1)  # defaults beside the fields


@pytest.mark.parametrize("data, message", [
    ({"steps": "3"}, "spec.steps: expected an integer, got '3' (string)"),
    ({"steps": True}, "spec.steps: expected an integer, got True (boolean)"),
    ({"steps": 2.0}, "spec.steps: expected an integer, got 2.0 (number)"),
    ({"steps": 1, "flag": 1}, "spec.flag: expected true or false, got 1 (integer)"),
    ({"steps": 1, "limit": "9"}, "spec.limit: expected an integer, got '9' (string)"),
    ({"steps": 1, "folder": ""}, "spec.folder: expected a path string, got '' (string)"),
    ({"steps": 1, "inner": {"rate": "fast"}}, "spec.inner.rate: expected a number, got 'fast' (string)"),
    ({"steps": 1, "inner": {"mode": "c"}}, "spec.inner.mode: expected one of 'a', 'b', got 'c' (string)"),
    ({"steps": 1, "inner": {"names": ["q", 3]}}, "spec.inner.names[1]: expected a string, got 3 (integer)"),
    ({"steps": 1, "inner": {"names": "some"}}, "spec.inner.names: expected one of 'all' or a list, got 'some'"),
    ({"steps": 1, "inner": {"rate": 1, "typo": 2}}, "spec.inner.typo: unknown to this engine's runtime"),
    ({"steps": 1, "inner": [1]}, "spec.inner: expected an object, got [1] (list)"),
    ({"steps": 1, "table": {"x": "1"}}, "spec.table.x: expected an integer, got '1' (string)"),
    ({}, "spec.steps: missing from the stage request"),
])
def test_a_wrong_value_is_refused_naming_its_field(data, message):
    with pytest.raises(P.InvalidInput) as caught:
        parse(Outer, data, "spec")
    assert str(caught.value).startswith(message)
    assert caught.value.exit_code == P.EXIT_INVALID


def test_the_request_parses_with_protocol_defaults_and_earlier_stages(tmp_path):
    request = {"run_dir": str(tmp_path), "stage_dir": str(tmp_path / "s"), "result_path": str(tmp_path / "r.json"),
               "spec": {"steps": 2}, "stage": "s", "resume": True, "future_field": 1,
               "stages": {"prep": {"dir": str(tmp_path / "prep"), "result": {"outputs": {"train": "t.jsonl"}}}}}
    typed = parse_request(Request, request)
    assert typed.run_dir == tmp_path and typed.spec.steps == 2 and typed.resume is True
    assert typed.device == "auto" and typed.train_rows == ()
    assert typed.output("prep", "train") == "t.jsonl" and typed.output("missing", "train") is None
    with pytest.raises(P.InvalidInput, match=r"^request.device: expected one of 'auto', 'cpu', 'cuda', 'mps'"):
        parse_request(Request, {**request, "device": "tpu"})


STAGE = """
import dataclasses, sys
from tt_stagekit import protocol as P
from tt_stagekit.stageconfig import StageRequest

@dataclasses.dataclass(frozen=True)
class Spec:
    steps: int

@dataclasses.dataclass(frozen=True)
class Request(StageRequest):
    spec: Spec

def body(request):
    P.log(f"steps={request.spec.steps!r}")
    return {"metrics": {"steps": request.spec.steps}}

P.run_main(body, [sys.argv[1]], request_type=Request)
"""


def run_stage_module(tmp_path, spec: dict[str, Any]):
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"run_dir": str(tmp_path), "stage_dir": str(tmp_path / "s"), "spec": spec,
                                   "result_path": str(tmp_path / "s" / "result.json")}))
    script = tmp_path / "stage.py"
    script.write_text(STAGE)
    proc = subprocess.run([sys.executable, str(script), str(request)], capture_output=True, text=True, timeout=60)
    return proc.returncode, [json.loads(line) for line in proc.stdout.splitlines()]


def test_run_main_hands_the_body_the_typed_request_or_exits_2_naming_the_field(tmp_path):
    code, events = run_stage_module(tmp_path, {"steps": 5})
    assert code == P.EXIT_OK and events[0]["message"] == "steps=5"
    assert json.loads((tmp_path / "s" / "result.json").read_text())["metrics"] == {"steps": 5}

    (tmp_path / "s" / "result.json").unlink()
    code, events = run_stage_module(tmp_path, {"steps": "5"})
    assert code == P.EXIT_INVALID
    assert events == [{"type": "log", "level": "error",
                       "message": "request.spec.steps: expected an integer, got '5' (string)"}]
    assert not (tmp_path / "s" / "result.json").exists()  # the body never ran
