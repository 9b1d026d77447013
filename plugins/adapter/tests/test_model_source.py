"""Base model resolution: local folders are fingerprinted; a pinned hub id resolves from the HF cache offline."""

from __future__ import annotations

import shutil

import pytest

from tt_engine_adapter import fingerprint
from tt_engine_adapter.runtime import model_source
from tt_engine_adapter.runtime.protocol import InputError

REV = "0123456789abcdef0123456789abcdef01234567"


def test_local_folder_fingerprint_notices_a_changed_byte(tmp_path, tiny_llama):
    copy = tmp_path / "model"
    shutil.copytree(tiny_llama, copy)
    first = model_source.fetch({"base_model": str(copy)})
    assert first["path"] == str(copy) and first["revision"] is None
    config = copy / "config.json"
    config.write_text(config.read_text().replace("}", " }", 1))
    assert fingerprint.folder_fingerprint(copy) != first["fingerprint"]


def test_incomplete_local_folder_is_refused(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    with pytest.raises(InputError, match="no weights"):
        model_source.fetch({"base_model": str(tmp_path / "m")})


def test_pinned_hub_id_resolves_from_the_cache_without_network(tmp_path, tiny_llama, monkeypatch):
    from huggingface_hub import constants

    snapshot = tmp_path / "hub" / "models--tt-test--tiny" / "snapshots" / REV
    shutil.copytree(tiny_llama, snapshot)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    found = model_source.fetch({"base_model": "tt-test/tiny", "base_model_revision": REV})
    assert found["path"] == str(snapshot) and found["revision"] == REV and found["name"] == "tt-test/tiny"
