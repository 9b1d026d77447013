"""Base model resolution: local folders are fingerprinted; a hub id at a commit, branch or tag resolves to the
commit in the HF cache offline."""

from __future__ import annotations

import os
import shutil
import time

import pytest

from tt_engine_adapter.formats import fingerprint
from tt_engine_adapter.runtime import model_source
from tt_stagekit.protocol import InvalidInput, StageError

REV = "0123456789abcdef0123456789abcdef01234567"


def test_local_folder_fingerprint_notices_a_changed_byte(tmp_path, tiny_llama, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    copy = tmp_path / "model"
    shutil.copytree(tiny_llama, copy)
    for path in copy.iterdir():
        os.utime(path)  # copytree keeps the source's mtimes: make them "just written"
    first_fresh = fingerprint.folder_fingerprint(copy)  # files just written: hashed, not cached (racy)
    assert not (tmp_path / "cache" / "tt" / "adapter-sha256-cache.json").exists()
    for path in copy.iterdir():
        os.utime(path, ns=(time.time_ns() - 10**10, time.time_ns() - 10**10))
    first = model_source.fetch(str(copy))
    assert first["path"] == str(copy) and first["revision"] is None and first["fingerprint"] == first_fresh
    assert (tmp_path / "cache" / "tt" / "adapter-sha256-cache.json").is_file()
    assert fingerprint.folder_fingerprint(copy) == first["fingerprint"]  # from the hash cache
    assert fingerprint.folder_fingerprint(copy, use_cache=False) == first["fingerprint"]
    weights = copy / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0x01  # same size: only the content (and mtime) change
    weights.write_bytes(bytes(data))
    assert fingerprint.folder_fingerprint(copy) != first["fingerprint"]


def test_incomplete_local_folder_is_refused(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    with pytest.raises(InvalidInput, match="no weights"):
        model_source.fetch(str(tmp_path / "m"))


def _offline_cache(tmp_path, monkeypatch, tiny_llama, refs: dict[str, str]):
    """A Hugging Face cache holding tt-test/tiny at REV, with refs/<name> files pointing at commits."""
    from huggingface_hub import constants

    repo = tmp_path / "hub" / "models--tt-test--tiny"
    snapshot = repo / "snapshots" / REV
    shutil.copytree(tiny_llama, snapshot)
    for name, commit in refs.items():
        (repo / "refs" / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / "refs" / name).write_text(commit)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return snapshot


def test_pinned_hub_id_resolves_from_the_cache_without_network(tmp_path, tiny_llama, monkeypatch):
    snapshot = _offline_cache(tmp_path, monkeypatch, tiny_llama, {})
    found = model_source.fetch("tt-test/tiny", REV)
    assert found["path"] == str(snapshot) and found["revision"] == REV and found["name"] == "tt-test/tiny"


@pytest.mark.parametrize("ref", ["main", "v1.0"])
def test_branch_or_tag_resolves_offline_to_the_commit_in_the_cache_refs(tmp_path, tiny_llama, monkeypatch, ref):
    snapshot = _offline_cache(tmp_path, monkeypatch, tiny_llama, {ref: REV})
    found = model_source.fetch("tt-test/tiny", ref)
    assert found == {"path": str(snapshot), "name": "tt-test/tiny", "revision": REV, "requested_revision": ref,
                     "fingerprint": None}


def test_branch_missing_from_the_offline_cache_names_what_to_do(tmp_path, tiny_llama, monkeypatch):
    _offline_cache(tmp_path, monkeypatch, tiny_llama, {"main": REV})
    with pytest.raises(StageError, match="tt-test/tiny@dev is not in the Hugging Face cache.*HF_HUB_OFFLINE"):
        model_source.fetch("tt-test/tiny", "dev")
