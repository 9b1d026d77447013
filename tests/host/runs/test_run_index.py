"""One run index in $TT_HOME: runs found by id (or a unique prefix) from any folder (docs/migrating.md, "Runs").

The long-run guide's form starts a run in a folder of its own (`--resume /abs/.../experiment-1`); it is listed,
got and reported from a third folder. Moved folders show as missing; ambiguous prefixes list their matches.
Models take unique prefixes too, and `tt models verify` a folder or manifest. The echo test engine runs.
"""

from __future__ import annotations

import json
import shutil

from conftest import TT, echo_spec, registered_runs, write_spec


def test_a_run_resumed_elsewhere_is_found_from_a_third_folder(tt, tmp_path):
    project, third = tmp_path / "project", tmp_path / "third"
    third.mkdir()
    spec = write_spec(project, echo_spec(steps=2))
    first = tmp_path / "store" / "foundation-runs" / "experiment-1"
    second = tmp_path / "store" / "foundation-runs" / "experiment-2"
    for folder in (first, second):
        code, out = tt.json("pipeline", "run", "--spec", spec, "--resume", folder)
        assert code == 0, out
    elsewhere = TT(tt.env, third)
    code, listed = elsewhere.json("runs", "list")
    assert code == 0 and {r["run_dir"] for r in listed["runs"]} == {str(first), str(second)}, listed
    assert all(r["status"] == "completed" for r in listed["runs"])
    assert elsewhere.json("runs", "list", "--here")[1] == {"runs": []}
    report = elsewhere("runs", "report", "experiment-1")
    assert report.returncode == 0 and "capitals" in report.stdout, report.stderr
    code, got = elsewhere.json("runs", "get", "experiment-2")
    assert code == 0 and got["run_dir"] == str(second)
    code, ambiguous = elsewhere.json("runs", "report", "experim")
    assert code == 2 and "experiment-1" in ambiguous["error"]["message"] and "experiment-2" in ambiguous["error"]["message"], ambiguous
    code, events = 0, elsewhere("runs", "events", "experiment-1")
    assert events.returncode == 0 and "train" in events.stdout

    shutil.move(str(first), str(tmp_path / "moved"))
    code, listed = elsewhere.json("runs", "list")
    status = {r["run_dir"]: r["status"] for r in listed["runs"]}
    assert status == {str(first): "missing", str(second): "completed"}, listed
    gone = elsewhere("runs", "get", "experiment-1")
    assert gone.returncode == 2 and "missing" in gone.stderr and "Traceback" not in gone.stderr, gone.stderr
    code, data = elsewhere.json("runs", "compare", "experiment-2", tmp_path / "moved")
    assert code == 0 and data["metrics"]["train.steps"] == [2, 2]


def test_models_by_unique_prefix_and_verified_by_folder_or_manifest(tt, tmp_path):
    ids = registered_runs(tt, write_spec(tmp_path, echo_spec(steps=2)), [tmp_path / "run-a", tmp_path / "run-b"])
    first = ids[0]
    code, got = tt.json("models", "get", first[: first.index("run-a") + len("run-a")])
    assert code == 0 and got["id"] == first, got
    code, ambiguous = tt.json("models", "get", "capitals-run-")
    assert code == 2 and all(i in ambiguous["error"]["message"] for i in ids), ambiguous
    path = json.loads((tmp_path / "tt-home" / "models" / f"{first}.json").read_text())["path"]
    for given in (path, f"{path}/artifact-manifest.json"):
        code, checked = tt.json("models", "verify", given)
        assert code == 0 and checked["ok"] and checked["path"] == path, checked
    (tmp_path / "not-a-model").mkdir()
    assert tt.json("models", "verify", tmp_path / "not-a-model")[0] == 2
