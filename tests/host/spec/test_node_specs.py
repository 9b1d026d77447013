"""Specs as the Node CLI 0.13 wrote them load as written (docs/migrating.md, "Spec keys").

The shape is Node's `tt init` output (src/commands/init.ts of tunedtensor/tuned-tensor-cli, plus the UUID `id`
the issue's Node-made projects carry): `id` beside `name`, a hub `base_model` without a revision, `eval_cases`.
Validation needs only the adapter's schema (host venv); the run with the recorded id uses the echo test engine.
The hub revision resolved by prefetch is tests/e2e/test_node_project.py's (a real adapter run, offline).
"""

from __future__ import annotations

import json

from conftest import echo_spec, write_spec
from node_spec_support import COMMIT, UUID, node_init_spec


def test_node_init_spec_validates_with_one_warning_per_legacy_item(tt, tmp_path):
    write_spec(tmp_path, node_init_spec())
    code, out = tt.json("validate")
    assert code == 0, out
    assert [w["loc"] for w in out["warnings"]] == ["id", "base_model_revision", "eval_cases"], out["warnings"]
    identity, revision, _ = (w["msg"] for w in out["warnings"])
    assert UUID in identity and "recorded identity" in identity
    assert "`main`" in revision and "tt models prefetch org/tiny-model" in revision
    human = tt("validate")
    assert human.returncode == 0 and len([l for l in human.stderr.splitlines() if l.startswith("warning:")]) == 3


def test_the_pin_line_names_the_cached_commit(tt, tmp_path):
    cache = tmp_path / "hf"
    (cache / "models--org--tiny-model" / "snapshots" / COMMIT).mkdir(parents=True)
    (cache / "models--org--tiny-model" / "refs").mkdir()
    (cache / "models--org--tiny-model" / "refs" / "main").write_text(COMMIT)
    tt.env["HF_HUB_CACHE"] = str(cache)
    code, out = tt.json("validate", write_spec(tmp_path, node_init_spec()))
    assert code == 0, out
    (revision,) = [w["msg"] for w in out["warnings"] if w["loc"] == "base_model_revision"]
    assert f'"base_model_revision": "{COMMIT}",' in revision, revision
    pinned = node_init_spec(base_model_revision=COMMIT)
    code, out = tt.json("validate", write_spec(tmp_path / "pinned", pinned))
    assert code == 0 and "base_model_revision" not in [w["loc"] for w in out["warnings"]]


def test_misspelled_keys_and_node_scaffold_texts_still_exit_2(tt, tmp_path):
    spec = node_init_spec()
    spec["eval_case"] = spec.pop("eval_cases")
    code, out = tt.json("validate", write_spec(tmp_path / "typo", spec))
    assert code == 2 and [e["loc"] for e in out["errors"]] == ["eval_case"], out
    scaffold = {"id": UUID, "name": "My Agent", "description": "", "base_model": "Qwen/Qwen3.5-2B",
                "system_prompt": "You are a helpful assistant.", "guidelines": [], "constraints": [],
                "examples": [{"input": "Hello", "output": "Hi! How can I help you today?"}], "eval_cases": []}
    folder = tmp_path / "scaffold"
    code, out = tt.json("validate", write_spec(folder, scaffold))
    assert code == 2, out
    assert [e["loc"] for e in out["errors"]][:3] == ["name", "system_prompt", "examples.0.input"], out
    assert all("Node CLI's `tt init` scaffold" in e["msg"] for e in out["errors"][:3])
    assert sorted(p.name for p in folder.iterdir()) == ["tunedtensor.json"]  # nothing created


def test_file_uris_are_read_as_paths(tt, tmp_path):
    rows = [{"messages": [{"role": "user", "content": f"r {i}"}, {"role": "assistant", "content": "x"}]}
            for i in range(4)]
    (tmp_path / "my data").mkdir()
    train = tmp_path / "my data" / "train.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = node_init_spec(dataset_prebuilt={"training": "file://" + str(train).replace(" ", "%20"),
                                            "format": "chat"})
    code, out = tt.json("validate", write_spec(tmp_path, spec))
    assert code == 0, out
    (uri,) = [w["msg"] for w in out["warnings"] if w["loc"] == "datasets.train"]
    assert str(train) in uri
    spec["dataset_prebuilt"]["training"] = "file://elsewhere/train.jsonl"
    code, out = tt.json("validate", write_spec(tmp_path, spec))
    assert code == 2 and out["errors"][0]["loc"] == "datasets.train", out


def test_the_node_id_is_recorded_with_the_run_and_its_model(tt, tmp_path):
    spec = {**echo_spec(steps=2), "id": UUID}
    code, out = tt.json("run", write_spec(tmp_path, spec))
    assert code == 0, out
    run = json.loads((tmp_path / out["run_dir"] / "run.json").read_text())
    assert run["spec_id"] == UUID and run["spec_name"] == "capitals"
    (model,) = out["report"]["models"]
    entry = json.loads((tmp_path / "tt-home" / "models" / f"{model['id']}.json").read_text())
    assert entry["spec_id"] == UUID
