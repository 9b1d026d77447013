"""The adapter's own manifest check refuses paths outside the adapter folder and malformed manifests."""

from __future__ import annotations

import hashlib
import json

from tt_engine_adapter.runtime.manifest import MANIFEST, verify_manifest


def test_outside_paths_and_malformed_manifests_are_refused(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"x")
    folder = tmp_path / "adapter"
    folder.mkdir()
    entry = {"size": 1, "sha256": hashlib.sha256(b"x").hexdigest()}
    (folder / MANIFEST).write_text(json.dumps({"files": [dict(entry, path="../secret.txt"),
                                                         dict(entry, path=str(secret))]}))
    problems = verify_manifest(folder)  # tt_stagekit.manifest.verify, the host's verifier too
    assert len(problems) == 3 and all("refused" in p for p in problems[:2]), problems
    assert problems[2] == f"{MANIFEST}: lists no files inside the model folder"
    (folder / MANIFEST).write_text(json.dumps({"files": [{"path": 3}]}))
    assert verify_manifest(folder)[0] == "files[0]: has no path"
