"""The model registry: ids are stable for a folder and never collide within a run."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from tt_host.models import registry as models


def artifact(folder: Path, content: str) -> Path:
    folder.mkdir(parents=True)
    (folder / "weights.bin").write_text(content)
    data = (folder / "weights.bin").read_bytes()
    (folder / "artifact-manifest.json").write_text(json.dumps({
        "format": 1, "kind": "adapter", "engine": "adapter",
        "files": [{"path": "weights.bin", "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}]}))
    return folder


@pytest.fixture(autouse=True)
def private_home(tmp_path, monkeypatch):
    monkeypatch.setenv("TT_HOME", str(tmp_path / "home"))


def register(path: Path, run_dir: Path) -> dict:
    return models.register(path, run_id="20261130-0001", run_dir=run_dir, spec_name="My Spec", engine="adapter",
                           kind="adapter")


def test_two_artifacts_of_one_kind_in_a_run_get_two_ids(tmp_path):
    first = register(artifact(tmp_path / "run" / "a", "one"), tmp_path / "run")
    second = register(artifact(tmp_path / "run" / "b", "two"), tmp_path / "run")
    assert first["id"] == "my-spec-20261130-0001-adapter"
    assert second["id"] == "my-spec-20261130-0001-adapter-2"
    assert models.get_model(first["id"])["source_path"] == str((tmp_path / "run" / "a").absolute())
    assert models.get_model(second["id"])["source_path"] == str((tmp_path / "run" / "b").absolute())


def test_registering_a_folder_again_keeps_its_id(tmp_path):
    folder = artifact(tmp_path / "run" / "a", "one")
    assert register(folder, tmp_path / "run")["id"] == register(folder, tmp_path / "run")["id"]
    assert len(models.list_models()) == 1


def test_an_unreadable_entry_is_not_overwritten(tmp_path):
    first = register(artifact(tmp_path / "run" / "a", "one"), tmp_path / "run")
    entry = models.registry_dir() / f"{first['id']}.json"
    entry.write_text("{ damaged")
    second = register(artifact(tmp_path / "run" / "b", "two"), tmp_path / "run")
    assert second["id"].endswith("-2") and entry.read_text() == "{ damaged"
