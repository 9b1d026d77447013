"""Packing never mixes rows: a model whose layers are not all attention (position ids separate packed rows in
attention only) is refused packing naming its type and those layers (runtime/batches.packing_refused, which the
train stage raises as exit 2); attention-only models keep it. Real config classes of the installed
transformers, no weights."""

from __future__ import annotations

import pytest
import transformers

from tt_engine_adapter.runtime.batches import packing_refused


def test_a_linear_attention_hybrid_is_refused_packing_naming_its_type_and_layers():
    config = transformers.Qwen3NextConfig(hidden_size=64, num_hidden_layers=4, num_attention_heads=2,
                                          num_key_value_heads=1, intermediate_size=128, vocab_size=128)
    why = packing_refused(config)
    assert why and why.startswith("hyperparameters.packing: qwen3_next has linear_attention layers")
    assert "set packing to false" in why


@pytest.mark.parametrize("name", ["MambaConfig", "JambaConfig"])
def test_state_space_models_are_refused_packing(name):
    config = getattr(transformers, name)()
    assert config.model_type in packing_refused(config)


@pytest.mark.parametrize("name", ["LlamaConfig", "Qwen3Config", "Gemma3TextConfig", "MistralConfig"])
def test_attention_only_models_keep_packing(name):
    assert packing_refused(getattr(transformers, name)()) is None
