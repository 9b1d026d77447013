"""tt's GRPO loss and gradients equal TRL's GRPOTrainer on the same completions and rewards (float32, 1e-5).

TRL runs its own `_generate_and_score_completions` (the completions handed in by a `rollout_func`, the rewards
by a reward function) and its `_compute_loss`; tt runs `reinforcement.train.backward`, the stage's code, in micro-batches
of 3 answers. The reference of the KL term: TRL's is the base with the adapter disabled, tt's a copy of the
LoRA tensors: both are the adapter as it was when training started (TRL loads a copy of a given PEFT adapter
as "ref"), and the policy then moves away from it before the loss is compared.

Gradients: equal to TRL's with beta = 0. With beta > 0, TRL 1.16's gradients (through its fused LM head,
`fused_lm_head=True`) differ from autograd of its own loss on its own tensors by up to 0.15 while the loss
agrees; tt's equal that autograd (plain logits, TRL's formula, TRL's advantages and reference log-probs).
"""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from tt_engine_adapter.runtime.reinforcement import train as reinforcement  # noqa: E402
from tt_engine_adapter.runtime.config import ReinforcementSettings  # noqa: E402
from tt_engine_adapter.runtime.reinforcement.prompts import Prompt  # noqa: E402

GROUP = 4
REWARDS = [1.0, 0.0, 0.5, 0.25, 0.0, 0.0, 0.0, 0.0, 0.2, 0.9, 0.9, 0.4]  # the second group has zero spread


def _model(tiny_llama):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(str(tiny_llama), dtype=torch.float32)
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules="all-linear"))
    _nudge(model)  # a trained (SFT) adapter, not the identity
    return model


def _nudge(model) -> None:
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(torch.randn_like(p) * 0.05)


@pytest.mark.parametrize("loss_type,beta", [("dapo", 0.0), ("grpo", 0.0), ("dapo", 0.04), ("grpo", 0.1)])
def test_grpo_loss_and_gradients_equal_trl(tmp_path, tiny_llama, loss_type, beta):
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_llama))
    eos = tokenizer.convert_tokens_to_ids("<|eot_id|>")
    prompt_texts = ["the film was great", "the plot felt dull", "honestly the cast is superb"]
    prompt_ids = [tokenizer("review: " + t, add_special_tokens=False)["input_ids"] for t in prompt_texts]
    width = max(len(p) for p in prompt_ids)  # equal lengths: no prompt padding (TRL's positions ignore it)
    prompt_ids = [[tokenizer.convert_tokens_to_ids("the")] * (width - len(p)) + p for p in prompt_ids]
    gen = torch.Generator().manual_seed(3)
    completions = []
    for i in range(len(REWARDS)):
        n = 2 + int(torch.randint(0, 6, (1,), generator=gen))
        body = torch.randint(10, 400, (n,), generator=gen).tolist()
        completions.append(body + [eos] if i % 3 else body)  # some end at the end-of-turn token, some at the budget

    def rollout(prompts, trainer):
        order = [prompt_texts.index(p) for p in prompts]
        return {"prompt_ids": [prompt_ids[o] for o in order], "completion_ids": completions,
                "logprobs": [[0.0] * len(c) for c in completions]}

    def reward(prompts, completions, **_):
        return list(REWARDS)

    model = _model(tiny_llama)
    args = GRPOConfig(output_dir=str(tmp_path / "trl"), per_device_train_batch_size=len(REWARDS),
                      num_generations=GROUP, max_completion_length=8, beta=beta, loss_type=loss_type,
                      temperature=0.7, use_cpu=True, report_to=[], bf16=False, logging_steps=1, seed=0,
                      disable_dropout=True)
    data = Dataset.from_list([{"prompt": t} for t in prompt_texts])
    trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=args, train_dataset=data,
                          processing_class=tokenizer, rollout_func=rollout)
    reference = reinforcement.ReferenceWeights(model)  # the adapter training starts from, as TRL's "ref" copy
    _nudge(model)  # the policy has moved since
    trainer.model.train()
    inputs = [{"prompt": t} for t in prompt_texts for _ in range(GROUP)]
    scored = trainer._generate_and_score_completions(inputs)
    trainer.current_gradient_accumulation_steps = 1
    theirs = trainer._compute_loss(trainer.model, scored)
    theirs.backward()
    params = [p for p in model.parameters() if p.requires_grad]
    their_grads = [p.grad.clone() for p in params]
    for p in params:
        p.grad = None

    rs = ReinforcementSettings(group_size=GROUP, kl_beta=beta, loss_type=loss_type, temperature=0.7)
    group = reinforcement.Group([Prompt(str(i), t, "", tuple(prompt_ids[i])) for i, t in enumerate(prompt_texts)],
                            completions, [""] * len(REWARDS), list(REWARDS), 0.0)
    ours = reinforcement.backward(model, group, rs, micro_batch=3, pad_id=tokenizer.pad_token_id, device="cpu",
                              reference=reference if beta else None)
    theirs = theirs.detach()
    assert abs(ours["loss"] - float(theirs)) <= 1e-5, (ours["loss"], float(theirs))
    my_grads = [p.grad.clone() for p in params]
    for p in params:
        p.grad = None
    ids = torch.cat([scored["prompt_ids"], scored["completion_ids"]], 1)
    att = torch.cat([scored["prompt_mask"], scored["completion_mask"]], 1)
    n = scored["completion_ids"].shape[1]
    logits = model(input_ids=ids, attention_mask=att).logits[:, -n-1:-1] / 0.7
    lp = torch.log_softmax(logits, -1).gather(-1, scored["completion_ids"].unsqueeze(-1)).squeeze(-1)
    adv = scored["advantages"].unsqueeze(1)
    ptl = -adv * torch.exp(lp - lp.detach())
    if beta:
        r = scored["ref_per_token_logps"]
        ptl = ptl + beta * (torch.exp(r - lp) - (r - lp) - 1)
    m = scored["completion_mask"]
    plain = (ptl * m).sum() / m.sum() if loss_type == "dapo" else ((ptl * m).sum(-1) / m.sum(-1)).mean()
    plain.backward()
    plain_grads = [p.grad.clone() for p in params]
    assert abs(float(plain) - float(theirs)) <= 1e-5
    for mine, plain_grad, their in zip(my_grads, plain_grads, their_grads):
        torch.testing.assert_close(mine, plain_grad, rtol=1e-5, atol=1e-5)
        if not beta:  # TRL's fused LM head's backward disagrees with autograd of its own loss when beta > 0
            torch.testing.assert_close(mine, their, rtol=1e-5, atol=1e-5)
    assert any(g.abs().sum() > 0 for g in my_grads)
