"""The host-side "Low" findings of issue 30: spec and dataset files read with a size cap; a `tt serve` log line is
shown as text, never read as rich markup; short API keys refused; model ids allocated under a lock; two
`tt run SPEC` in the same second get two run folders; a spec's remote MLflow tracking URI needs the user's
consent. (A spec name's escape sequences: tests/host/spec/test_blank_text.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from badinput_support import in_process_tt
from conftest import echo_spec, write_spec


@pytest.fixture(scope="module")
def tt_in(tmp_path_factory):
    with in_process_tt(tmp_path_factory.mktemp("tt-in")) as tt:
        yield tt


def test_a_sparse_64_gib_spec_or_dataset_is_refused_by_size_not_read(tt_in, tmp_path):
    spec = tmp_path / "big" / "tunedtensor.json"
    spec.parent.mkdir()
    with open(spec, "wb") as handle:
        handle.truncate(64 << 30)  # sparse: no disk used, a MemoryError for whoever reads it whole
    code, out = tt_in.json("validate", spec)
    assert code == 2 and any("over the" in e["msg"] and str(spec) in e["msg"] for e in out["errors"]), out
    folder = tmp_path / "s"
    with open(write_spec(folder, echo_spec()).with_name("general.jsonl"), "wb") as handle:
        handle.truncate(64 << 30)
    data = {**echo_spec(), "evaluation": {"general_regression": {"dataset": "general.jsonl"}}}
    code, out = tt_in.json("validate", write_spec(folder, data))
    assert code == 2 and any("over the" in e["msg"] for e in out["errors"]
                             if e["loc"].startswith("evaluation.general_regression")), out


def test_a_serve_log_line_with_markup_is_shown_as_written(capsys):
    from tt_host.cli.serve import show_event

    for level in ("error", "warning", "info"):
        show_event({"type": "log", "level": level, "message": f"{level}: bad tag [/x] and [bold]kept[/bold]"})
    show_event({"type": "ready", "model": "m[/y]", "url": "http://127.0.0.1:1", "context_length": 8,
                "device": "cpu"})
    captured = capsys.readouterr()
    for level in ("error", "warning", "info"):
        assert f"{level}: bad tag [/x] and [bold]kept[/bold]" in captured.err, captured.err
    assert "m[/y]" in captured.out, captured.out


def test_an_api_key_shorter_than_16_characters_is_refused(tt, tmp_path):
    for key in ("Qz", "fifteen-chars-x"):
        tt.env["TT_API_KEY"] = key
        code, out = tt.json("serve", "no-such-model")
        assert code == 2 and "at least 16" in out["error"] and key not in out["error"], out
    tt.env["TT_API_KEY"] = "sixteen-chars-xy"
    code, out = tt.json("serve", "no-such-model")
    assert code == 2 and "no registered model" in out["error"], out  # past the key check


REGISTER = """
import sys
from pathlib import Path
from tt_host.models.registry import register
from tt_stagekit.manifest import write_manifest
folder = Path(sys.argv[1])
folder.mkdir()
(folder / "weights.bin").write_bytes(folder.name.encode())
write_manifest(folder, "echo", "echo")
print(register(folder, run_id="same-run", run_dir=folder.parent, spec_name="same", engine="echo", kind="echo")["id"])
"""


def test_concurrent_registrations_of_one_id_lose_nothing(tmp_path):
    env = dict(os.environ, TT_HOME=str(tmp_path / "home"))
    procs = [subprocess.Popen([sys.executable, "-c", REGISTER, str(tmp_path / f"model-{n}")], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for n in range(12)]
    ids = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        ids.append(out.strip())
    assert len(set(ids)) == 12, ids
    entries = sorted((tmp_path / "home" / "models").glob("*.json"))
    assert len(entries) == 12, [e.name for e in entries]
    assert {json.loads(e.read_text())["id"] for e in entries} == set(ids)


def test_two_runs_of_one_spec_in_the_same_second_get_two_folders(tt, tmp_path, monkeypatch):
    from tt_host.runs.opening import claim_new_run_dir

    target = tmp_path / "runs" / "20260101-000000-abcdef01"  # the id two runs started in one second compute
    assert [claim_new_run_dir(target) for _ in range(3)] == [target, target.with_name(target.name + "-2"),
                                                             target.with_name(target.name + "-3")]
    spec = write_spec(tmp_path / "s", echo_spec(steps=2))
    procs = [tt.popen("run", spec, "--json") for _ in range(2)]  # started together: one second, as a rule
    outs = [json.loads(proc.communicate(timeout=300)[0]) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outs
    assert len({out["run_dir"] for out in outs}) == 2, outs


def test_a_spec_cannot_send_the_run_to_a_remote_mlflow_without_consent(monkeypatch):
    from tt_observer_mlflow import tracking_uri

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("TT_MLFLOW_SPEC_TRACKING_URI", raising=False)
    remote = {"tracking_uri": "https://collector.example/mlflow"}
    with pytest.raises(ValueError, match="nothing was sent"):
        tracking_uri(remote)
    assert tracking_uri({"tracking_uri": "file:///tmp/mlruns"}) == "file:///tmp/mlruns"  # local: as written
    assert tracking_uri({"tracking_uri": "mlruns-here"}) == "mlruns-here"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "https://collector.example/mlflow")  # the user chose the same one
    assert tracking_uri(remote) == "https://collector.example/mlflow"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "https://mine.example")
    with pytest.raises(ValueError):
        tracking_uri(remote)
    monkeypatch.setenv("TT_MLFLOW_SPEC_TRACKING_URI", "1")
    assert tracking_uri(remote) == "https://collector.example/mlflow"
