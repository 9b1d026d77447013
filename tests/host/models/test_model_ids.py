"""Model ids are made of a safe character set, checked where they are made and where they are read: an edited
run.json never makes tt chmod or delete outside its folders; a run folder named with spaces gives a findable id,
and a second run of the same name gets its own entry; an entry an older tt registered with an odd id is found."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from conftest import echo_spec, write_spec
from tt_host import ids
from tt_host.models import registry as models
from tt_host.models.export import ExportError, serving_folder
from tt_host.models.references import ResolvedModel, from_folder


def foundation_model(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "tt-model.json").write_text("{}")
    data = (folder / "tt-model.json").read_bytes()
    (folder / models.MANIFEST).write_text(json.dumps({
        "format": 1, "kind": "foundation-sft", "engine": "foundation",
        "files": [{"path": "tt-model.json", "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}]}))
    return folder


def test_an_id_from_an_edited_run_json_is_safe(tmp_path, monkeypatch):
    monkeypatch.setenv("TT_HOME", str(tmp_path / "home"))
    run = tmp_path / "run"
    model = foundation_model(run / "sft" / "model")
    (run / "run.json").write_text(json.dumps({"id": "../../../victim", "spec_name": "Evil/../Spec"}))
    resolved = from_folder(model)
    assert ids.is_model_id(resolved.model_id), resolved.model_id
    assert resolved.model_id == "evil-spec-victim-foundation-sft"


def test_serving_folder_never_chmods_or_deletes_outside_tt_home(tmp_path, monkeypatch):
    monkeypatch.setenv("TT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TT_PLUGINS", "no-such-plugin")  # no engine: the export itself stops early
    from tt_host.plugins import plugins

    plugins.cache_clear()
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("mine")
    os.chmod(tmp_path, 0o755)
    from tt_host.engine import SERVE_EXPORT, Export, ModelKind

    declared = ModelKind("foundation-sft", "sft/model", serve=SERVE_EXPORT, export=Export("m.export", "hf"))
    model = ResolvedModel(form=SERVE_EXPORT, path=foundation_model(tmp_path / "m"), model_id="../../victim",
                          kind="foundation-sft", engine="foundation", model_kind=declared)
    try:
        with pytest.raises(ExportError):
            serving_folder(model, offline=True, log=lambda line: None)
    finally:
        plugins.cache_clear()
    assert (victim / "precious.txt").read_text() == "mine"
    assert tmp_path.stat().st_mode & 0o777 == 0o755


def test_ids_and_inside():
    assert ids.folder_name("e-My Run-echo") != "e-My Run-echo" and ids.is_model_id(ids.folder_name("../x y"))
    assert ids.folder_name("e-My Run-echo") != ids.folder_name("e-my-run-echo")
    with pytest.raises(ids.OutsideError):
        ids.inside(Path("/tmp/a/../b"), Path("/tmp/a"))
    with pytest.raises(ids.OutsideError):
        ids.inside(Path("/tmp/a"), Path("/tmp/a"))
    assert ids.inside(Path("/tmp/a/b/c"), Path("/tmp/a")) == Path("/tmp/a/b/c").resolve()


def _ids(tt) -> list[str]:
    code, listing = tt.json("models", "list")
    assert code == 0
    return [m["id"] for m in listing["models"]]


def test_a_run_named_with_spaces_is_findable_and_a_second_one_keeps_the_first(tt, tmp_path):
    first = tmp_path / "a" / "My Run"
    code, out = tt.json("run", write_spec(tmp_path / "a", echo_spec(steps=1)), "--resume", first)
    assert code == 0, out
    (registered,) = _ids(tt)
    assert registered == "capitals-my-run-echo"
    code, out = tt.json("run", write_spec(tmp_path / "b", echo_spec(steps=1)), "--resume", tmp_path / "b" / "My Run")
    assert code == 0, out
    assert sorted(_ids(tt)) == ["capitals-my-run-echo", "capitals-my-run-echo-2"]
    for model_id in _ids(tt):
        code, out = tt.json("models", "verify", model_id)
        assert code == 0 and out["ok"], out
    code, out = tt.json("models", "get", "capitals-my-run-echo")
    assert code == 0 and out["source_path"].startswith(str(first))

    # an entry an older tt wrote under an id with spaces is still found (by reading entries, not by its path)
    entry = json.loads((tmp_path / "tt-home" / "models" / "capitals-my-run-echo.json").read_text())
    legacy = dict(entry, id="e-My Run-echo")
    (tmp_path / "tt-home" / "models" / "e-My Run-echo.json").write_text(json.dumps(legacy))
    code, out = tt.json("models", "verify", "e-My Run-echo")
    assert code == 0 and out["ok"], out
    outside = tmp_path / "tt-home" / "evil.json"
    outside.write_text(json.dumps(legacy))
    code, out = tt.json("models", "verify", "../evil")
    assert code == 2 and "no registered model" in out["error"]["message"]
