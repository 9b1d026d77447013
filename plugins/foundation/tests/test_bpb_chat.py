"""BPB follows nanochat's definition; chat rendering masks; the RL/eval reward."""

import math

import numpy as np
import torch
import torch.nn.functional as F

from tt_engine_foundation.runtime import tokenizer as T
from tt_engine_foundation.runtime.bpb import evaluate_bpb, evaluate_bpb_document_starts
from tt_engine_foundation.runtime.chat import fit_example, render, render_prompt, reward
from tt_engine_foundation.runtime.model import GPT, config_for_depth


def _tok():
    return T.train(iter(["hello world, what is 2 plus 3? 5. ünïcode 🎉"] * 30), 300)


def _tiny_model():
    tok = _tok()
    torch.manual_seed(0)
    model = GPT(config_for_depth(1, 300, 8))
    model.init_weights(0)
    return tok, model, T.special_id(tok, T.BOS)


def test_bpb_matches_the_definition():
    tok, model, bos = _tiny_model()
    ids = [bos] + T.encode(tok, "hello world 🎉") + [bos] + T.encode(tok, "what is 2 plus 3?")
    table = torch.tensor(T.token_bytes(tok) + [0] * (300 - tok.get_vocab_size()))
    out = evaluate_bpb(model, np.array(ids), 8, 2, table, torch.device("cpu"))
    nats, nbytes = 0.0, 0
    for start in range(0, len(ids) - 1, 8):
        window = ids[start : start + 9]
        with torch.no_grad():
            lg = model(torch.tensor([window[:-1]]))[0]
        loss = F.cross_entropy(lg, torch.tensor(window[1:]), reduction="none")
        for target, value in zip(window[1:], loss.tolist()):
            b = len(T.token_raw_bytes(tok, target))
            if b > 0:
                nats += value
                nbytes += b
    assert nbytes == len("hello world 🎉".encode()) + len("what is 2 plus 3?".encode())
    assert math.isclose(out["bpb"], nats / (math.log(2) * nbytes), rel_tol=1e-6)
    assert out["bytes"] == nbytes


def test_bpb_over_document_starts_scores_each_document_from_its_bos():
    tok, model, bos = _tiny_model()
    docs = ["hello world 🎉 hello world, what is", "5.", "what is 2 plus 3?", "2 plus"]
    ids = [i for d in docs for i in [bos] + T.encode(tok, d)]
    table = torch.tensor(T.token_bytes(tok) + [0] * (300 - tok.get_vocab_size()))
    out = evaluate_bpb_document_starts(model, np.array(ids), bos, 8, 2, table, torch.device("cpu"))
    nats, nbytes = 0.0, 0
    for doc in docs:  # each document alone, from its BOS, its first 9 tokens
        window = ([bos] + T.encode(tok, doc))[:9]
        with torch.no_grad():
            lg = model(torch.tensor([window[:-1]]))[0]
        loss = F.cross_entropy(lg, torch.tensor(window[1:]), reduction="none")
        for target, value in zip(window[1:], loss.tolist()):
            b = len(T.token_raw_bytes(tok, target))
            nats += value if b > 0 else 0.0
            nbytes += b
    assert len(T.encode(tok, docs[0])) > 8  # the first document is cut: its tail is not scored
    assert math.isclose(out["bpb"], nats / (math.log(2) * nbytes), rel_tol=1e-6) and out["bytes"] == nbytes


def test_render_masks_assistant_tokens_only():
    tok = _tok()
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "what is 2 plus 3?"},
                {"role": "assistant", "content": "5"}]
    ids, mask = render(tok, messages)
    supervised = [i for i, m in zip(ids, mask) if m]
    assert supervised == T.encode(tok, "5") + [T.special_id(tok, T.ASSISTANT_END)]
    prompt = render_prompt(tok, messages, 100)
    assert prompt[-1] == T.special_id(tok, T.ASSISTANT_START) and prompt == ids[: len(prompt)]
    short, short_mask, trimmed = fit_example(tok, messages, len(ids) - 2)  # the user text loses its start
    assert trimmed and len(short) <= len(ids) - 2 and [i for i, m in zip(short, short_mask) if m] == supervised
    assert short[:3 + len(T.encode(tok, "sys"))] == ids[:3 + len(T.encode(tok, "sys"))]  # the system turn whole


def test_reward_exact_and_numeric():
    assert reward(" Paris ", "paris") == 1.0
    assert reward("Paris.", "paris") == 1.0  # as the host's exact match: edge punctuation stripped
    assert reward("Paris is", "paris") == 0.0
    assert reward("the answer is 1,234", "1234") == 1.0
    assert reward("7 then 8", "7") == 0.0
    assert reward("no number", "3") == 0.0
