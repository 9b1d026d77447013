"""The adapter's `preference` block on the host side: `tt run --dry-run` lists its stages, a pairs file that holds
an example's prompt (which the host may hold out) is refused at `tt validate` naming file:line, a spec with two
tuning blocks is refused naming both, the reference stage's fingerprint ignores beta and the loss."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from conftest import write_spec
from tt_engine_adapter.formats import tuning

CONFIG = {"hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 512, "intermediate_size": 128,
          "num_attention_heads": 4, "num_key_value_heads": 4, "tie_word_embeddings": False}
EXAMPLES = [{"input": f"review number {i}", "output": "positive" if i % 2 else "negative"} for i in range(8)]


def _spec(folder: Path, **preference) -> Path:
    model = folder / "model"
    model.mkdir(parents=True, exist_ok=True)
    (model / "config.json").write_text(json.dumps(CONFIG))
    return write_spec(folder, {"name": "pref", "engine": "adapter", "base_model": "model", "device": "cpu",
                               "system_prompt": "Classify the review.", "examples": EXAMPLES,
                               "hyperparameters": {"max_seq_length": 64, "max_new_tokens": 32},
                               "preference": preference})


def test_dry_run_lists_the_preference_stages_between_train_and_candidate(tt, tmp_path):
    code, plan = tt.json("run", _spec(tmp_path / "s", beta=0.2), "--dry-run")
    assert code == 0, plan
    names = [d["stage"] for d in plan["stages"] if d["action"] != "skip"]
    assert names[names.index("train"):] == ["train", "sft", "reference", "preference", "candidate"], names
    assert all(d["action"] == "run" for d in plan["stages"] if d["stage"] != "reinforce"), plan
    code, plain = tt.json("run", write_spec(tmp_path / "plain", {**json.loads(_spec(tmp_path / "p").read_text()),
                                                                   "preference": None}), "--dry-run")
    assert code == 0, plain
    skipped = {d["stage"]: d["action"] for d in plain["stages"]}
    assert skipped["sft"] == skipped["reference"] == skipped["preference"] == "skip", plain


def test_a_pairs_file_holding_an_example_prompt_is_refused_naming_file_and_line(tt, tmp_path):
    folder = tmp_path / "leak"
    folder.mkdir()
    pairs = folder / "pairs.jsonl"
    pairs.write_text(json.dumps({"prompt": "a review of its own", "chosen": "positive", "rejected": "negative"}) + "\n"
                     + json.dumps({"prompt": "Review  Number 3!", "chosen": "positive", "rejected": "negative"}) + "\n")
    spec = _spec(folder, pairs="pairs.jsonl")
    before = sorted(p.name for p in folder.iterdir())
    code, out = tt.json("validate", spec)
    assert code == 2, out
    text = json.dumps(out)
    assert f"{pairs}:2" in text and "examples[3].input" in text and "held-out" in text, out
    assert sorted(p.name for p in folder.iterdir()) == before  # nothing created
    pairs.write_text(json.dumps({"prompt": "a review of its own", "chosen": "positive", "rejected": "negative"}) + "\n")
    code, out = tt.json("validate", spec)
    assert code == 0, out


def test_a_pairs_file_holding_the_exact_prompt_of_an_example_written_as_people_write_is_refused(tt, tmp_path):
    """Examples with capitals and a question mark (their key differs from their text): the exact prompt, and its
    twin, are each refused naming file:line; both sides of the comparison are normalized."""
    folder = tmp_path / "exact"
    spec = json.loads(_spec(folder, pairs="pairs.jsonl").read_text())
    spec["examples"] = [{"input": f"Is review number {i} positive?", "output": "yes" if i % 2 else "no"}
                        for i in range(8)]
    path = write_spec(folder, spec)
    for prompt in ("Is review number 5 positive?", "is REVIEW number 5 positive"):
        (folder / "pairs.jsonl").write_text(
            json.dumps({"prompt": "a review of its own", "chosen": "yes", "rejected": "no"}) + "\n"
            + json.dumps({"prompt": prompt, "chosen": "yes", "rejected": "no"}) + "\n")
        code, out = tt.json("validate", path)
        text = json.dumps(out)
        assert code == 2 and f"{folder / 'pairs.jsonl'}:2" in text and "examples[5].input" in text, (prompt, out)


def test_a_bad_pairs_line_is_refused_naming_it(tt, tmp_path):
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "pairs.jsonl").write_text(json.dumps({"prompt": "x", "chosen": "same", "rejected": "Same"}) + "\n")
    code, out = tt.json("validate", _spec(folder, pairs="pairs.jsonl"))
    assert code == 2 and "pairs.jsonl:1" in json.dumps(out) and "same answer" in json.dumps(out), out


def test_two_tuning_blocks_are_named_together():
    both = SimpleNamespace(preference=object(), reinforcement=object())
    error = tuning.both_given(both)
    assert error and "preference and reinforcement" in error
    assert tuning.both_given(SimpleNamespace(preference=object(), reinforcement=None)) is None
    assert tuning.final_adapter_stage(SimpleNamespace(preference=None)) == "train"
    assert tuning.final_adapter_stage(SimpleNamespace(preference=object())) == "preference"
    assert tuning.final_adapter_stage(SimpleNamespace(reinforcement=object())) == "reinforce"


def test_the_reference_fingerprint_ignores_beta_loss_and_optimizer_but_not_the_sampling(tmp_path):
    from tt_host.runs.fingerprint import chain
    from tt_host.spec.loading import load_spec
    from tt_host.plugins import load_plugins

    plugins = load_plugins()
    engine = plugins.engine("adapter")

    def prints(**preference):
        loaded = load_spec(_spec(tmp_path / "one", **preference), plugins)  # one folder: one base model path
        assert loaded.valid, loaded.errors
        return {p.stage.name: p.fingerprint for p in chain(engine, loaded.spec, loaded.compiled)}

    first = prints(beta=0.1)
    other = prints(beta=0.5, loss="simpo", learning_rate=1e-3, sft_weight=0.2)
    assert first["reference"] == other["reference"] and first["train"] == other["train"]
    assert first["preference"] != other["preference"] and first["candidate"] != other["candidate"]
    assert first["reference"] != prints(beta=0.1, samples_per_prompt=8)["reference"]
    assert first["reference"] != prints(beta=0.1, reference="base")["reference"]


def test_a_pipeline_document_runs_the_preference_stages_as_steps_of_the_train(tt, tmp_path):
    spec = _spec(tmp_path, beta=0.2)
    assert tt.json("pipeline", "init", tmp_path)[0] == 0
    code, plan = tt.json("pipeline", "plan", "--spec", spec)
    assert code == 0, plan
    steps = {s["id"]: s["stages"] for s in plan["steps"]}
    assert steps["train"][-4:] == ["train", "reference", "preference", "reinforce"], steps  # GRPO's too (skipped here)
    assert steps["candidate"][-6:] == ["train", "sft", "reference", "preference", "reinforce", "candidate"], steps


def test_a_pairs_file_is_read_once_at_validate_and_one_over_the_cap_is_refused_naming_its_size(tmp_path, monkeypatch):
    """A 374 MB pairs file took minutes and gigabytes to validate: read whole, and read and checked twice. It is
    streamed line by line, once, under MAX_PAIRS_BYTES (a share of this machine's memory)."""

    from tt_engine_adapter.formats import pairs as pair_files
    from tt_host.plugins import load_plugins
    from tt_host.spec.loading import load_spec
    from tt_stagekit import chatrows

    folder = tmp_path / "s"
    folder.mkdir()
    lines = [json.dumps({"prompt": f"a review number {i}", "chosen": "positive", "rejected": "negative"})
             for i in range(40)]
    (folder / "pairs.jsonl").write_text("\n".join(lines) + "\n")
    spec = _spec(folder, pairs="pairs.jsonl")
    opened: list[str] = []
    real = chatrows.open_regular
    monkeypatch.setattr(chatrows, "open_regular", lambda path: opened.append(Path(path).name) or real(path))
    loaded = load_spec(spec, load_plugins())
    assert loaded.valid, loaded.errors
    assert opened.count("pairs.jsonl") == 1, opened
    monkeypatch.setattr(pair_files, "MAX_PAIRS_BYTES", 1000)
    loaded = load_spec(spec, load_plugins())
    text = json.dumps([e.msg for e in loaded.errors])
    assert not loaded.valid and "pairs.jsonl is " in text and "over the 1,000-byte limit" in text, text
    assert 1 << 20 <= pair_files._pairs_cap() <= 1 << 30
