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
