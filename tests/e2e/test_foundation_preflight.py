"""The preflight through `tt` (no training): a fresh `tt init` spec is refused field by field; `tt doctor
--json` measures the run and backup folders it names; upper-case corpus suffixes are shards."""

from __future__ import annotations

import json
import shutil

from foundation_support import tiny_spec, tt

PLACEHOLDER_FIELDS = {"name", "system_prompt", "guidelines.0", "examples.0.input", "examples.0.output",
                      "examples.1.input", "examples.1.output", "foundation.corpus_path"}


def test_fresh_init_spec_is_refused_naming_each_placeholder(tmp_path):
    assert tt(tmp_path, "init", tmp_path / "new", "--engine", "foundation").returncode == 0
    spec = tmp_path / "new" / "tunedtensor.json"
    proc = tt(tmp_path, "validate", spec, "--json")
    out = json.loads(proc.stdout)
    assert proc.returncode == 2 and not out["valid"]
    assert {e["loc"] for e in out["errors"]} == PLACEHOLDER_FIELDS, out["errors"]
    assert all("tt init` placeholder" in e["msg"] for e in out["errors"])
    ran = tt(tmp_path, "run", spec)
    assert ran.returncode == 2 and "foundation.corpus_path" in ran.stderr
    assert sorted(p.name for p in spec.parent.iterdir()) == ["tunedtensor.json"]  # nothing created


def test_doctor_json_measures_the_run_and_backup_folders(tmp_path):
    spec = tiny_spec(tmp_path / "spec", checkpoint_backup_dir="backups/tt")
    run_dir, backup = tmp_path / "runs" / "first", spec.parent / "backups" / "tt"
    proc = tt(tmp_path, "doctor", spec, "--resume", run_dir, "--json")
    checks = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}
    run_disk = checks["disk: run folder"]
    assert run_disk["status"] == "ok" and run_disk["data"]["folder"] == str(run_dir)
    assert run_disk["data"]["measured_at"] == str(tmp_path)  # the nearest folder that exists
    assert run_disk["data"]["free_bytes"] > run_disk["data"]["need_bytes"] > 0
    assert {"token cache", "pretraining checkpoints", "SFT checkpoints"} <= set(run_disk["data"]["parts"])
    backup_disk = checks["disk: foundation.checkpoint_backup_dir"]
    assert backup_disk["data"]["folder"] == str(backup) and backup_disk["data"]["measured_at"] == str(spec.parent)
    writable = checks["foundation.checkpoint_backup_dir writable"]
    assert writable["status"] == "ok" and writable["data"]["writable"] is True
    same = checks["foundation.checkpoint_backup_dir disk"]  # one tmp filesystem here: a warning, not a failure
    assert same["status"] == "warn" and same["data"]["same_filesystem"] is True
    assert "foundation.device" in checks
    assert not run_dir.exists() and not backup.exists() and not (spec.parent / ".tuned-tensor").exists()


def test_upper_case_corpus_suffix_is_a_shard(tmp_path):
    spec = tiny_spec(tmp_path / "spec")
    shutil.move(spec.parent / "corpus.jsonl", spec.parent / "CORPUS.JSONL")
    data = json.loads(spec.read_text())
    data["foundation"]["corpus_path"] = "CORPUS.JSONL"
    spec.write_text(json.dumps(data))
    proc = tt(tmp_path, "validate", spec)
    assert proc.returncode == 0, proc.stdout + proc.stderr
