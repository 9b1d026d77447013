"""Model manifests: listed paths stay inside the model folder (absolute and `..` entries are refused, never
hashed), a manifest listing only outside files never verifies, and a malformed manifest is a clear problem."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from tt_host.models.registry import MANIFEST, verify_artifact


def entry(path: str, data: bytes) -> dict:
    return {"path": path, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


@pytest.fixture
def outside(tmp_path) -> Path:
    secret = tmp_path / "outside.txt"
    secret.write_bytes(b"not the model's")
    return secret


def model(folder: Path, manifest) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / MANIFEST).write_text(manifest if isinstance(manifest, str) else json.dumps(manifest))
    return folder


@pytest.mark.parametrize("listed", ["ABS", "../outside.txt", "sub/../../outside.txt", "./../outside.txt"])
def test_a_manifest_listing_only_outside_files_never_verifies(tmp_path, outside, listed):
    rel = str(outside) if listed == "ABS" else listed
    folder = model(tmp_path / "m", {"format": 1, "kind": "adapter", "files": [entry(rel, outside.read_bytes())]})
    (folder / "sub").mkdir()
    _, problems = verify_artifact(folder)
    reasons = " ".join(f"{p.file}: {p.reason}" for p in problems)
    assert problems and "refused" in reasons and "lists no files inside the model folder" in reasons


def test_a_symlink_out_of_the_folder_is_refused(tmp_path, outside):
    folder = model(tmp_path / "m", {"format": 1, "files": [entry("weights.bin", outside.read_bytes())]})
    (folder / "weights.bin").symlink_to(outside)
    _, problems = verify_artifact(folder)
    assert any(p.file == "weights.bin" and "outside the model folder" in p.reason for p in problems)


@pytest.mark.parametrize("manifest, expected", [
    ("[]", "must be a JSON object"),
    ('{"files": {"path": "a"}}', "`files` must be a list"),
    ('{"files": ["a"]}', "files[0]: must be an object"),
    ('{"files": [{"size": 1}]}', "files[0]: has no path"),
    ('{"files": [{"path": "a", "size": "1", "sha256": "00"}]}', "size must be a non-negative integer"),
    ('{"files": [{"path": "a", "size": 1, "sha256": null}]}', "sha256 must be 64"),
    ("{bad json", "invalid JSON"),
])
def test_a_malformed_manifest_is_a_clear_problem(tmp_path, manifest, expected):
    _, problems = verify_artifact(model(tmp_path / "m", manifest))
    assert any(expected in str(p) for p in problems), problems


def test_cli_refuses_a_malformed_or_escaping_manifest_without_a_traceback(tt, tmp_path, outside):
    bad = model(tmp_path / "bad", "[1, 2]")
    code, out = tt.json("models", "export", str(bad), str(tmp_path / "out"))
    assert code == 1 and "must be a JSON object" in out["error"]["message"] and not (tmp_path / "out").exists()
    escaping = model(tmp_path / "esc", {"format": 1, "kind": "foundation-hf",
                                        "files": [entry("../outside.txt", outside.read_bytes())]})
    (escaping / "config.json").write_text("{}")
    proc = tt("serve", str(escaping), "--json")
    assert proc.returncode == 1 and "refused" in json.loads(proc.stdout)["error"]["message"], proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
