"""`tt models prefetch` and `tt models verify-base` against a local Hugging Face snapshot cache, offline
(HF_HUB_OFFLINE=1): prefetch resolves `main` to the cached commit with huggingface_hub in the adapter's environment
and prints the pin line; verify-base names what a snapshot lacks.
"""

from __future__ import annotations


from conftest import write_spec
from node_spec_support import COMMIT, node_init_spec


def cache(tmp_path):
    repo = tmp_path / "hf" / "models--org--tiny-model"
    snapshot = repo / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (snapshot / "model.safetensors").write_bytes(b"\0" * 16)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    return snapshot


def test_prefetch_prints_the_commit_and_verify_base_checks_the_snapshot(tt, tmp_path):
    snapshot = cache(tmp_path)
    tt.env.update(HF_HUB_CACHE=str(tmp_path / "hf"), HF_HUB_OFFLINE="1")
    code, out = tt.json("models", "prefetch", "org/tiny-model")
    assert code == 0, out
    assert out["commit"] == COMMIT and out["path"] == str(snapshot)
    assert out["pin"] == f'"base_model_revision": "{COMMIT}",'
    human = tt("models", "prefetch", "org/tiny-model")
    assert human.returncode == 0 and out["pin"] in human.stdout
    missing = tt.json("models", "prefetch", "org/absent")
    assert missing[0] == 1 and "org/absent@main could not be fetched" in missing[1]["error"]["message"]
    assert tt.json("models", "prefetch", "not a hub id")[0] == 2

    write_spec(tmp_path, node_init_spec())  # the hub model without a revision: `main`, the cached commit
    code, out = tt.json("models", "verify-base")
    assert code == 0 and out["commit"] == COMMIT and out["files"] == 2 and out["problems"] == [], out
    (snapshot / "model.safetensors").unlink()
    (snapshot / "tokenizer.json").symlink_to(tmp_path / "hf" / "blob-that-is-gone")
    code, out = tt.json("models", "verify-base", "org/tiny-model", "--revision", COMMIT)
    assert code == 1 and any("tokenizer.json: missing" in p for p in out["problems"])
    assert any("no weights file" in p for p in out["problems"]), out
    code, out = tt.json("models", "verify-base", "org/other")
    assert code == 1 and "tt models prefetch org/other" in out["problems"][0]
