"""A run folder given as MODEL under a TT_HOME that registered nothing of it (a colleague's project folder): the
model is the one its last completed stage declared in result.json, and a planted result.json cannot point it at a
folder outside the run (tt_host/models/references.py, `from_run_dir`)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from conftest import TT, echo_spec, write_spec


def _run_elsewhere(tt: TT, tmp_path: Path) -> tuple[Path, TT]:
    """A finished echo run, and `tt` under another TT_HOME that registered none of its models."""
    code, out = tt.json("run", str(write_spec(tmp_path / "project", echo_spec(steps=2))))
    assert code == 0, out
    return Path(out["run_dir"]), TT(dict(tt.env, TT_HOME=str(tmp_path / "colleague-home")), tmp_path)


def test_an_unregistered_run_folder_means_the_model_its_last_stage_declared(tt, tmp_path):
    run, elsewhere = _run_elsewhere(tt, tmp_path)
    code, exported = elsewhere.json("models", "export", str(run), str(tmp_path / "out"))
    assert code == 0, exported
    assert (tmp_path / "out" / "table.json").read_bytes() == (run / "train" / "model" / "table.json").read_bytes()


def test_a_planted_artifact_path_never_leads_out_of_the_run(tt, tmp_path):
    run, elsewhere = _run_elsewhere(tt, tmp_path)
    outside = tmp_path / "outside"
    shutil.copytree(run / "train" / "model", outside)
    (outside / "table.json").write_text("{}")  # fails its manifest: taking it would exit 1
    result = run / "train" / "result.json"
    data = json.loads(result.read_text())
    data["artifacts"] = [dict(a, path=str(outside)) for a in data["artifacts"]] + \
                        [dict(a, path="../../../outside") for a in data["artifacts"]]
    result.write_text(json.dumps(data))
    code, exported = elsewhere.json("models", "export", str(run), str(tmp_path / "out"))
    assert code == 0, exported  # the declared folder inside the run, not the planted one
    assert (tmp_path / "out" / "table.json").read_bytes() == (run / "train" / "model" / "table.json").read_bytes()
