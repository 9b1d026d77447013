"""Generation with the shared prompt prefix prefilled once (decode/prefix.py, runtime/generate.py) on the real base
(SmolLM2-135M-Instruct, float32, CPU): greedy tokens equal the unshared path's for a batch of held-out prompts
that share the compiled system prompt, and for a GRPO-shaped batch (each prompt repeated for its answers); the
shared path really ran (`shared_prefix_rows`). One model load; a few seconds of CPU after it.
"""

from __future__ import annotations

import pytest
import torch

from tt_engine_adapter.decode import prefix
from tt_engine_adapter.runtime import chat
from tt_engine_adapter.runtime.generate import generate

SYSTEM = "Rate the movie review: thumbs up or thumbs down. Answer with the two words only."
REVIEWS = ["a warm, funny and moving film", "the plot was dull and slow " * 3, "great acting",
           "I walked out after twenty minutes, bored", "a masterpiece of quiet tension", "meh"]


@pytest.fixture(scope="module")
def base(real_base):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(real_base)
    model = AutoModelForCausalLM.from_pretrained(real_base, dtype=torch.float32)
    return model.eval(), tok


def _prompts(texts: list[str]) -> list[dict]:
    return [{"id": f"p{i}", "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": t}]}
            for i, t in enumerate(texts)]


def _both(model, tok, prompts: list[dict], batch_size: int) -> tuple[list[dict], list[dict], dict]:
    settings = dict(max_new_tokens=12, batch_size=batch_size, max_seq_length=128, device="cpu")
    stats: dict = {}
    shared = generate(model, tok, prompts, stats=stats, **settings)
    whole = generate(model, tok, prompts, share_prefix=False, **settings)
    return shared, whole, stats


def test_held_out_batch_same_greedy_tokens(base):
    model, tok = base
    prompts = _prompts(REVIEWS)
    shared, whole, stats = _both(model, tok, prompts, batch_size=4)
    assert stats["shared_prefix_rows"] == len(prompts)  # both batches (4 and 2 rows) shared their prefix
    assert shared == whole
    assert len({p["prediction"] for p in whole}) > 1  # the answers differ: the rows' own tokens were read


def test_grpo_shaped_batch_same_greedy_tokens(base):
    model, tok = base
    prompts = _prompts([t for t in REVIEWS[:2] for _ in range(3)])  # two prompts, three answers each
    shared, whole, stats = _both(model, tok, prompts, batch_size=3)
    assert stats["shared_prefix_rows"] == len(prompts)  # a group's rows share all but their prompt's last id
    assert shared == whole


def test_prefix_layout(base):
    _, tok = base
    encoded = [chat.encode_prompt(tok, p["messages"], 128)[0] for p in _prompts(REVIEWS[:3])]
    length = prefix.common(encoded)
    assert length >= prefix.MIN_PREFIX and all(e[:length] == encoded[0][:length] for e in encoded)
    assert len({e[length] for e in encoded}) > 1  # the longest common start
    assert prefix.common([encoded[0], encoded[0]]) == len(encoded[0]) - 1  # each row keeps its last id to run
    assert prefix.common(encoded[:1]) == 0


def test_a_sliding_window_model_runs_every_row_whole_and_says_why(base):
    model, tok = base
    model.config.sliding_window, was = 64, getattr(model.config, "sliding_window", None)
    try:
        note = prefix.note(model)
        stats: dict = {}
        generate(model, tok, _prompts(REVIEWS[:2]), max_new_tokens=2, batch_size=2, max_seq_length=128, device="cpu",
                 stats=stats)
    finally:
        model.config.sliding_window = was
    assert "off" in note and "sliding-window" in note
    assert stats["shared_prefix_rows"] == 0
    assert prefix.note(model).startswith("shared prompt prefix on")
