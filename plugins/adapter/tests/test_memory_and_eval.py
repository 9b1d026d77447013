"""Memory savers and evaluation during training.

Gradient checkpointing gives the loss and gradients of the plain forward (fp32, CPU) while autograd keeps
fewer bytes; early stopping ends a run whose validation loss rises, and the adapter registered is the best
evaluation's (same sha256 as checkpoints/best, and its validation loss is the best one, not the last).
The CUDA-only savers (4-bit QLoRA, fp16 with a gradient scaler) are in test_cuda_memory.py.
"""

from __future__ import annotations

import hashlib
import json

import pytest
import torch

from tt_engine_adapter.runtime import memory, model_source
from tt_engine_adapter.runtime import train as loop
from tt_engine_adapter.runtime.config import AdapterSettings
from tt_engine_adapter.testing.harness import sentiment_run


def _loss_grads_saved(model_dir, hp: AdapterSettings):
    """One forward/backward of the LoRA model on a fixed batch: loss, LoRA gradients, bytes saved for backward."""
    torch.manual_seed(0)
    model = model_source.load_model(str(model_dir), "cpu", torch.float32)
    model = loop.wrap_lora(memory.prepare_base(model, hp), hp)
    model.train()
    ids = torch.randint(3, model.config.vocab_size, (2, 48), generator=torch.Generator().manual_seed(1))
    saved = []

    def pack(t):
        saved.append(t.numel() * t.element_size())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=ids).loss
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
    return loss.item(), grads, sum(saved)


def test_gradient_checkpointing_same_loss_and_gradients(tiny_llama):
    plain = AdapterSettings(lora_rank=4, lora_dropout=0.0)
    loss, grads, plain_bytes = _loss_grads_saved(tiny_llama, plain)
    loss_c, grads_c, ckpt_bytes = _loss_grads_saved(tiny_llama, AdapterSettings(lora_rank=4, lora_dropout=0.0,
                                                                                 gradient_checkpointing=True))
    assert loss_c == pytest.approx(loss, rel=1e-6, abs=1e-6)
    assert grads_c.keys() == grads.keys() and grads
    for name, grad in grads.items():
        torch.testing.assert_close(grads_c[name], grad, rtol=1e-5, atol=1e-7, msg=name)
    assert ckpt_bytes < plain_bytes, (ckpt_bytes, plain_bytes)  # the activations are recomputed, not kept


HP = {"max_steps": 60, "n_epochs": 60, "batch_size": 4, "lora_rank": 4, "lora_dropout": 0.0, "learning_rate": 2e-2,
      "lr_scheduler": "constant", "warmup_ratio": 0.0, "max_seq_length": 96, "max_new_tokens": 4,
      "eval_interval_steps": 2, "early_stopping_patience": 2, "checkpoint_interval_steps": 1000}


def test_early_stopping_registers_the_best_adapter(tmp_path, tiny_llama):
    run = sentiment_run(tmp_path / "run", str(tiny_llama), HP, n_train=16, n_eval=2)
    # validation rows whose answers are the opposite sentiment: the better training fits, the worse they score
    from tt_engine_adapter.testing.tiny_model import sentiment_examples

    flipped = {"positive": "negative", "negative": "positive"}
    lines = [json.dumps({"id": f"val-{i}", "messages": [
        {"role": "system", "content": run.system}, {"role": "user", "content": e["input"]},
        {"role": "assistant", "content": flipped[e["output"]]}]}) for i, e in enumerate(sentiment_examples(40, 99)[-8:])]
    validation = tmp_path / "validation.jsonl"
    validation.write_text("\n".join(lines) + "\n")
    run.spec["datasets"] = {"train": None, "validation": str(validation), "test": None}
    run.stage("prepare")
    run.stage("prefetch")
    result = run.stage("train")["result"]
    metrics, curve = result["metrics"], result["series"]["train.validation_loss"]
    assert metrics["train.stopped_early"] == 1 and metrics["train.steps"] < HP["max_steps"]
    assert len(result["series"]["train.loss"]) == metrics["train.steps"]
    losses = [v for _, v in curve]
    best = min(range(len(losses)), key=losses.__getitem__)
    assert curve[best][0] == metrics["train.best_step"] and losses[best] == pytest.approx(metrics["train.validation_loss"])
    assert len(losses) - 1 - best == HP["early_stopping_patience"]  # stopped after that many evaluations without a new best
    assert all(v >= losses[best] for v in losses[best + 1:]) and losses[-1] > losses[best]

    stage = run.run_dir / "train"
    registered = stage / "adapter" / "adapter_model.safetensors"
    best_file = stage / "checkpoints" / "best" / "adapter_model.safetensors"
    assert hashlib.sha256(registered.read_bytes()).hexdigest() == hashlib.sha256(best_file.read_bytes()).hexdigest()
    assert json.loads((stage / "checkpoints" / "best" / "best.json").read_text())["step"] == metrics["train.best_step"]

    # the registered weights are the best step's, not the last step's: their validation loss is the best one
    from peft import PeftModel

    from tt_engine_adapter.runtime import chat
    from tt_engine_adapter.runtime.data import encode_rows, read_jsonl

    tokenizer = model_source.load_tokenizer(str(tiny_llama))
    rows = encode_rows(tokenizer, read_jsonl(run.run_dir / "prepare" / "validation.jsonl"), HP["max_seq_length"])
    model = PeftModel.from_pretrained(model_source.load_model(str(tiny_llama), "cpu", torch.float32), stage / "adapter")
    again = loop.mean_loss(model, rows, HP["batch_size"], chat.pad_token_id(tokenizer), "cpu", None)
    assert again == pytest.approx(losses[best], abs=1e-5) and abs(again - losses[-1]) > 1e-4
