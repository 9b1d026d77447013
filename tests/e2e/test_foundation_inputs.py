"""Item 5 through `tt`: bad corpora seen without reading data are refused by `tt validate` and `tt run`
(exit 2, no run directory); bad data found while streaming fails the run naming file and line, keeps
the finished stages, and the run resumes once the file is fixed."""

from __future__ import annotations

import json
import os

import pytest

from foundation_support import report, tiny_spec, tt


def _edit(spec, **foundation):
    data = json.loads(spec.read_text())
    data["foundation"].update(foundation)
    spec.write_text(json.dumps(data))


@pytest.mark.parametrize(
    "case, loc, words",
    [
        ("missing", "foundation.corpus_path", "does not exist"),
        ("link", "foundation.corpus_path", "symbolic link"),
        ("empty_folder", "foundation.corpus_path", "holds no shards"),
        ("same_as_training", "foundation.validation_path", "training corpus itself"),
        ("inside_training", "foundation.validation_path", "inside the training corpus"),
        ("missing_validation", "foundation.validation_path", "does not exist"),
        ("uneven_split", "foundation.nproc_per_node", "cannot be split evenly"),
        ("no_endpoint", "foundation.rdzv_endpoint", "is not set"),
        ("typo", "foundation.detph", "unknown field"),
        ("warmup", "foundation.warmup_steps", "must be smaller than pretrain_steps"),
        ("no_init_model", "foundation.init_model", "no registered model"),
    ],
)
def test_bad_inputs_are_refused_before_anything_is_created(tmp_path, case, loc, words):
    spec = tiny_spec(tmp_path / "spec")
    folder = spec.parent
    if case == "missing":
        _edit(spec, corpus_path="nope.jsonl")
    elif case == "link":
        os.symlink(folder / "corpus.jsonl", folder / "linked.jsonl")
        _edit(spec, corpus_path="linked.jsonl")
    elif case == "empty_folder":
        (folder / "shards" / "sub").mkdir(parents=True)
        (folder / "shards" / "README.md").write_text("not a shard")
        _edit(spec, corpus_path="shards")
    elif case == "same_as_training":
        _edit(spec, validation_path="./corpus.jsonl")
    elif case == "inside_training":
        (folder / "shards").mkdir()
        (folder / "shards" / "a.jsonl").write_text('{"text": "x"}\n')
        (folder / "shards" / "held.jsonl").write_text('{"text": "y"}\n')
        _edit(spec, corpus_path="shards", validation_path="shards/held.jsonl")
    elif case == "missing_validation":
        _edit(spec, validation_path="gone.txt")
    elif case == "uneven_split":
        _edit(spec, nproc_per_node=3, batch_size=8, gradient_accumulation_steps=2)
    elif case == "no_endpoint":
        _edit(spec, nnodes=2)
    elif case == "typo":
        _edit(spec, detph=3)
    elif case == "warmup":
        _edit(spec, warmup_steps=200, pretrain_steps=100)
    elif case == "no_init_model":
        _edit(spec, init_model="no-such-model", corpus_path=None, validation_path=None)

    before = sorted(p.name for p in folder.iterdir())
    validated = tt(tmp_path, "validate", spec)
    assert validated.returncode == 2, validated.stdout + validated.stderr
    assert loc in validated.stdout + validated.stderr and words in validated.stdout + validated.stderr
    ran = tt(tmp_path, "run", spec)
    assert ran.returncode == 2, ran.stdout + ran.stderr
    assert loc in ran.stdout + ran.stderr
    assert sorted(p.name for p in folder.iterdir()) == before  # no .tuned-tensor, nothing new


def _with_general_set(spec) -> None:
    """Adds a three-row general-regression set (the same finished run also shows the foundation gate)."""
    rows = [{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": f"Count to {n}."},
                          {"role": "assistant", "content": " ".join(map(str, range(1, n + 1)))}]} for n in (2, 3, 4)]
    (spec.parent / "general.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    data = json.loads(spec.read_text())
    data["evaluation"] = {"general_regression": {"dataset": "general.jsonl"}}
    spec.write_text(json.dumps(data))


def test_bad_row_while_streaming_fails_names_line_and_resumes_after_fix(tmp_path):
    spec = tiny_spec(tmp_path / "spec", tokenizer_max_chars=2_000, pretrain_steps=8, checkpoint_interval_steps=4)
    _with_general_set(spec)
    corpus = spec.parent / "corpus.jsonl"
    good = corpus.read_text()
    lines = good.splitlines()
    lines[400] = '{"text": "broken row'
    corpus.write_text("\n".join(lines) + "\n")
    run_dir = tmp_path / "run"
    failed = tt(tmp_path, "run", spec, "--resume", run_dir)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert f"{corpus}:401: malformed JSON" in failed.stdout + failed.stderr
    state = json.loads((run_dir / "run.json").read_text())
    assert state["stages"]["tokenizer"]["state"] == "completed"
    assert state["stages"]["token_cache"]["state"] == "failed"
    tokenizer_bytes = (run_dir / "tokenizer" / "tokenizer.json").read_bytes()

    corpus.write_text(good)
    resumed = tt(tmp_path, "run", spec, "--resume", run_dir)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert (run_dir / "tokenizer" / "tokenizer.json").read_bytes() == tokenizer_bytes  # kept, not redone
    assert report(run_dir)["metrics"]["pretrain.steps"] == 8

    # the general-regression gate: the pretrained model (before SFT) is the baseline, the final model the candidate
    gate = report(run_dir)["general_regression"]
    assert gate["status"] in ("passed", "failed") and gate["baseline"]["count"] == gate["candidate"]["count"] == 3
    baseline = json.loads((run_dir / "general_baseline" / "request.json").read_text())
    # it answers the held-out prompts too (the run's base side: base -> tuned) and the general set with its own system
    held_out = json.loads((run_dir / "chat_eval" / "request.json").read_text())["eval_prompts"]
    assert [p["id"] for p in baseline["eval_prompts"]] == [p["id"] for p in held_out] != []
    assert [m["role"] for m in baseline["general_prompts"][0]["messages"]] == ["system", "user"]
    outputs = json.loads((run_dir / "general_baseline" / "result.json").read_text())["outputs"]
    assert outputs["model"] == str(run_dir / "pretrain" / "model")
    assert json.loads((run_dir / "chat_eval" / "result.json").read_text())["outputs"]["model"] == str(
        run_dir / "sft" / "model")
