"""The host's record of a stage call (tt_host.runs.invoke.StageCall) and the request it becomes.

In process, no subprocess: every request the host would write for a foundation run parses into the
engine's typed request (tt_engine_foundation.runtime.config, the stage side), so the two ends of the
protocol agree on every field and type.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from tt_host.runs.progress import QuietReporter
from tt_host.engines.envs import EnvInfo
from tt_host.plugins import load_plugins
from tt_host.runs.fingerprint import chain
from tt_host.runs.invoke import RunCall, StageCall, stage_request
from tt_host.runs.store import RunDir
from tt_host.spec.loading import load_spec


@pytest.fixture
def call(tmp_path) -> RunCall:
    spec = {"name": "adder", "engine": "foundation", "system_prompt": "Add the numbers.",
            "examples": [{"input": f"{i} plus {i}", "output": str(2 * i)} for i in range(4)],
            "foundation": {"depth": 2, "pretrain_steps": 10, "device": "cpu"}}
    path = tmp_path / "tunedtensor.json"
    path.write_text(json.dumps(spec))
    loaded = load_spec(path, load_plugins())
    assert loaded.valid, loaded.errors
    return RunCall(loaded, load_plugins(), RunDir(tmp_path / "run"), None, QuietReporter(), "d" * 64, False)


def test_every_request_the_host_writes_parses_into_the_engines_typed_request(call, tmp_path):
    from tt_engine_foundation.runtime.config import parse

    env = EnvInfo("foundation", "k", tmp_path / "env", tmp_path / "env" / "bin" / "python", False, 0.0)
    completed = {"tokenizer": {"dir": str(tmp_path / "run" / "tokenizer"), "result": {"outputs": {"tokenizer": "t"}}}}
    plan = chain(call.loaded.engine, call.loaded.spec, call.loaded.compiled)
    for stage, _, fingerprint in plan:
        stage_call = StageCall(call, env, stage, fingerprint, False, completed, None)
        with pytest.raises(dataclasses.FrozenInstanceError):
            stage_call.resume = True  # type: ignore[misc]
        stage_dir = tmp_path / "run" / stage.name
        request = json.loads(json.dumps(stage_request(stage_call, stage_dir, stage_dir / "result.json").to_json()))
        typed = parse(request)
        assert typed.stage == stage.name and typed.stage_dir == stage_dir and typed.fingerprint == fingerprint
        assert typed.cfg.depth == 2 and typed.cfg.pretrain_steps == 10 and typed.device_choice == "cpu"
        assert typed.output("tokenizer", "tokenizer") == "t"
        assert (len(typed.train_rows) > 0) == stage.gets_train_rows
