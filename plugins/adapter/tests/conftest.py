"""Shared fixtures: tiny Llama- and Qwen3-style base models built once per session (no hub)."""

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
