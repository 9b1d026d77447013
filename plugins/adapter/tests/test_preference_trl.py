"""tt's DPO and SimPO losses and their LoRA gradients equal TRL's on the same batch (float32, within 1e-5);
a pair is rendered by the SFT rows' code, token for token."""

from __future__ import annotations

import copy

import pytest
import torch

from tt_engine_adapter.runtime import chat
from tt_engine_adapter.runtime.config import AdapterSettings
from tt_engine_adapter.runtime.data import encode_rows, with_system
from tt_engine_adapter.runtime.preference.logps import completion_logps
from tt_engine_adapter.runtime.preference.loss import batch_loss
from tt_engine_adapter.runtime.preference.pairs import encode_pair, reference_logps

SYSTEM = "Classify the sentiment of the review."
PAIRS = [
    {"id": "a", "messages": [{"role": "user", "content": "the film was great"}], "chosen": "positive",
     "rejected": "negative, clearly"},
    {"id": "b", "messages": [{"role": "user", "content": "the plot was dull and slow"}], "chosen": "negative",
     "rejected": "positive"},
    {"id": "c", "messages": [{"role": "user", "content": "lovely music"}], "chosen": "positive indeed",
     "rejected": "neutral"},
]
BETA, GAMMA = 0.3, 0.7


def _model(tiny_llama):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tt_engine_adapter.runtime.train import wrap_lora

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(tiny_llama)
    model = AutoModelForCausalLM.from_pretrained(tiny_llama, dtype=torch.float32)
    model = wrap_lora(model, AdapterSettings(lora_rank=4, lora_dropout=0.0))
    with torch.no_grad():  # a trained-looking adapter: the policy differs from the reference (adapter disabled)
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn_like(p) * 0.05)
    model.train()
    return model, tokenizer


def _encoded(tokenizer):
    eot = chat.end_of_turn_id(tokenizer)
    return [encode_pair(tokenizer, p, SYSTEM, 256, eot) for p in PAIRS]


def _ours(model, tokenizer, loss, reference="sft"):
    pad = chat.pad_token_id(tokenizer)
    encoded = _encoded(tokenizer)
    rows = [c for c, _ in encoded] + [r for _, r in encoded]
    ref = torch.tensor(reference_logps(model, rows, pad, "cpu", 2, reference))
    model.train()
    sums, counts, (per_token, mask) = completion_logps(model, rows, pad, "cpu")
    n = len(PAIRS)
    policy = {"pc": sums[:n], "pr": sums[n:], "nc": counts[:n], "nr": counts[n:],
              "chosen_tokens": (per_token[:n], mask[:n])}
    value, _ = batch_loss(loss, policy, {"rc": ref[:n], "rr": ref[n:]}, BETA, GAMMA, 0.0)
    model.zero_grad()
    value.backward()
    return value.detach(), {k: p.grad.clone() for k, p in model.named_parameters() if p.requires_grad}


def _split(encoded_row):
    """(prompt ids, completion ids) of a rendered row: the completion starts at its first supervised label."""
    start = next(i for i, label in enumerate(encoded_row.labels) if label != chat.IGNORE_INDEX)
    return encoded_row.input_ids[:start], encoded_row.input_ids[start:]


def _compare(ours, theirs, model_theirs):
    loss, grads = ours
    assert abs(float(loss) - float(theirs)) < 1e-5, (float(loss), float(theirs))
    other = {k.replace("base_model.model.", "", 0): p.grad for k, p in model_theirs.named_parameters() if p.requires_grad}
    mine = {k.replace("base_model.model.", "", 0): g for k, g in grads.items()}
    assert mine.keys() == other.keys() and mine
    for name, grad in mine.items():
        torch.testing.assert_close(grad, other[name], rtol=0, atol=1e-5, msg=name)


def _with_new_adapter(trainer_class, peft_model, **kwargs):
    """A TRL trainer given the base and a new adapter (so its reference disables the adapter), whose adapter then
    gets `peft_model`'s weights: (trainer, its model)."""
    from peft import LoraConfig

    weights = {k: p.detach().clone() for k, p in peft_model.named_parameters() if p.requires_grad}
    config = LoraConfig(r=4, lora_alpha=32.0, lora_dropout=0.0, target_modules="all-linear", bias="none",
                        task_type="CAUSAL_LM")
    trainer = trainer_class(model=peft_model.get_base_model(), peft_config=config, **kwargs)
    with torch.no_grad():
        for name, p in trainer.model.named_parameters():
            if p.requires_grad:
                p.copy_(weights[name])
    return trainer, trainer.model


def _trl_loss(trainer, model, examples):
    """TRL's loss on our batch, its gradients in `model`."""
    batch = trainer.data_collator(examples)
    model.train()
    model.zero_grad()
    loss = trainer.compute_loss(model, batch)
    loss.backward()
    return loss.detach()


@pytest.mark.parametrize("reference", ["sft", "base"])
def test_dpo_loss_and_gradients_equal_trls_dpo_trainer(tiny_llama, tmp_path, reference):
    """reference "sft": TRL given the trained adapter keeps a frozen copy of it as the reference; "base": TRL
    given a new adapter (peft_config) disables it for the reference, and that adapter then gets our weights."""
    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer

    model, tokenizer = _model(tiny_llama)
    theirs_model = copy.deepcopy(model)  # TRL patches the model it is given (its fused LM head)
    ours = _ours(model, tokenizer, "dpo", reference)

    examples = []
    for chosen, rejected in _encoded(tokenizer):
        prompt, chosen_ids = _split(chosen)
        prompt_r, rejected_ids = _split(rejected)
        assert prompt == prompt_r
        examples.append({"prompt_ids": prompt, "chosen_ids": chosen_ids, "rejected_ids": rejected_ids})
    data = Dataset.from_list([{"prompt": "x", "chosen": "y", "rejected": "z"}] * 3)
    args = DPOConfig(output_dir=str(tmp_path / "dpo"), beta=BETA, loss_type=["sigmoid"], report_to="none",
                     per_device_train_batch_size=3, use_cpu=True, precompute_ref_log_probs=False, max_length=None)
    if reference == "sft":
        trainer = DPOTrainer(model=theirs_model, args=args, train_dataset=data, processing_class=tokenizer)
    else:
        trainer, theirs_model = _with_new_adapter(DPOTrainer, theirs_model, args=args, train_dataset=data,
                                                  processing_class=tokenizer)
    _compare(ours, _trl_loss(trainer, theirs_model, examples), theirs_model)


def test_simpo_loss_and_gradients_equal_trls_cpo_trainer(tiny_llama, tmp_path):
    from datasets import Dataset
    from trl.experimental.cpo import CPOConfig, CPOTrainer

    model, tokenizer = _model(tiny_llama)
    theirs_model = copy.deepcopy(model)
    ours = _ours(model, tokenizer, "simpo")

    pad = chat.pad_token_id(tokenizer)
    encoded = _encoded(tokenizer)
    width = max(len(r.input_ids) for pair in encoded for r in pair)

    def padded(rows, key, fill):
        return torch.tensor([getattr(r, key) + [fill] * (width - len(r.input_ids)) for r in rows])

    chosen, rejected = [c for c, _ in encoded], [r for _, r in encoded]
    batch = {"chosen_input_ids": padded(chosen, "input_ids", pad),
             "chosen_attention_mask": torch.tensor([[1] * len(r.input_ids) + [0] * (width - len(r.input_ids)) for r in chosen]),
             "chosen_labels": padded(chosen, "labels", -100),
             "rejected_input_ids": padded(rejected, "input_ids", pad),
             "rejected_attention_mask": torch.tensor([[1] * len(r.input_ids) + [0] * (width - len(r.input_ids)) for r in rejected]),
             "rejected_labels": padded(rejected, "labels", -100)}
    data = Dataset.from_list([{"prompt": "x", "chosen": "y", "rejected": "z"}] * 3)
    args = CPOConfig(output_dir=str(tmp_path / "cpo"), beta=BETA, loss_type="simpo", simpo_gamma=GAMMA, cpo_alpha=0.0,
                     report_to="none", per_device_train_batch_size=3, use_cpu=True)
    trainer = CPOTrainer(model=theirs_model, args=args, train_dataset=data, processing_class=tokenizer)
    theirs_model.train()
    theirs_model.zero_grad()
    loss, _ = trainer.get_batch_loss_metrics(theirs_model, batch)
    loss.backward()
    _compare(ours, loss.detach(), theirs_model)


def test_a_pair_renders_token_for_token_as_the_sft_row(tiny_model):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    eot = chat.end_of_turn_id(tokenizer)
    for pair in PAIRS:
        chosen, rejected = encode_pair(tokenizer, pair, SYSTEM, 256, eot)
        for encoded, side in ((chosen, "chosen"), (rejected, "rejected")):
            row = {"id": "r", "messages": with_system(SYSTEM, pair["messages"] + [{"role": "assistant",
                                                                                   "content": pair[side]}])}
            sft = encode_rows(tokenizer, [row], 256)[0]
            assert encoded.input_ids == sft.input_ids and encoded.labels == sft.labels
            assert encoded.input_ids[-1] == eot and encoded.labels[-1] == eot  # the end-of-turn is the completion's


@pytest.mark.parametrize("loss", ["dpo", "simpo", "kto"])
def test_every_loss_is_finite_and_prefers_the_chosen_answer_after_a_step(tiny_llama, loss):
    """One AdamW step on the loss raises the chosen answers' margin over the rejected ones."""
    model, tokenizer = _model(tiny_llama)
    pad = chat.pad_token_id(tokenizer)
    encoded = _encoded(tokenizer)
    rows = [c for c, _ in encoded] + [r for _, r in encoded]
    with torch.no_grad(), model.disable_adapter():
        ref, _, _ = completion_logps(model, rows, pad, "cpu")
    n = len(PAIRS)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=0.05)

    def margin_and_loss():
        sums, counts, tokens = completion_logps(model, rows, pad, "cpu")
        policy = {"pc": sums[:n], "pr": sums[n:], "nc": counts[:n], "nr": counts[n:], "chosen_tokens": (tokens[0][:n], tokens[1][:n]),
                  "kl": sums[n:].roll(1)}
        value, _ = batch_loss(loss, policy, {"rc": ref[:n], "rr": ref[n:], "kl": ref[n:].roll(1)}, BETA, GAMMA, 0.1)
        return float((sums[:n] - sums[n:]).mean()), value

    before, value = margin_and_loss()
    assert torch.isfinite(value)
    value.backward()
    optimizer.step()
    after, _ = margin_and_loss()
    assert after > before


def test_kto_loss_and_gradients_equal_trls_kto_trainer(tiny_llama, tmp_path):
    """Each pair is a desirable (chosen) and an undesirable (rejected) example for KTOTrainer; both carry the pair's
    KL sequence (its prompt with the previous pair's chosen answer), so TRL's z is the mean over the same
    sequences as ours. Reference "base": TRL given a new adapter disables it, which then gets our weights."""
    from datasets import Dataset
    from trl import KTOConfig, KTOTrainer

    from tt_engine_adapter.runtime.preference.pairs import encode_kl

    model, tokenizer = _model(tiny_llama)
    theirs_model = copy.deepcopy(model)
    pad = chat.pad_token_id(tokenizer)
    encoded = _encoded(tokenizer)
    kl_rows = encode_kl(tokenizer, PAIRS, SYSTEM, 256, chat.end_of_turn_id(tokenizer))
    n = len(PAIRS)
    rows = [c for c, _ in encoded] + [r for _, r in encoded] + kl_rows
    ref = torch.tensor(reference_logps(model, rows, pad, "cpu", 4, "base"))
    model.train()
    # A few steps toward the KL completions, so z > 0: TRL clamps a negative z to 0, leaving the KL term untested.
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=0.02)
    for _ in range(3):
        optimizer.zero_grad()
        (-completion_logps(model, kl_rows, pad, "cpu")[0].sum()).backward()
        optimizer.step()
    theirs_model = copy.deepcopy(model)
    sums, counts, tokens = completion_logps(model, rows, pad, "cpu")
    assert float((sums[2 * n:] - ref[2 * n:]).mean()) > 0
    policy = {"pc": sums[:n], "pr": sums[n:2 * n], "nc": counts[:n], "nr": counts[n:2 * n],
              "chosen_tokens": (tokens[0][:n], tokens[1][:n]), "kl": sums[2 * n:]}
    value, _ = batch_loss("kto", policy, {"rc": ref[:n], "rr": ref[n:2 * n], "kl": ref[2 * n:]}, BETA, GAMMA, 0.0)
    model.zero_grad()
    value.backward()
    ours = (value.detach(), {k: p.grad.clone() for k, p in model.named_parameters() if p.requires_grad})

    examples = []
    for label, side in ((True, 0), (False, 1)):
        for i, pair in enumerate(encoded):
            prompt, completion = _split(pair[side])
            kl_prompt, kl_completion = _split(kl_rows[i])
            assert kl_prompt == prompt
            examples.append({"prompt_ids": prompt, "completion_ids": completion, "KL_completion_ids": kl_completion,
                             "label": label})
    data = Dataset.from_list([{"prompt": "x", "completion": "y", "label": True},
                              {"prompt": "x", "completion": "z", "label": False}] * 3)
    args = KTOConfig(output_dir=str(tmp_path / "kto"), beta=BETA, report_to="none", per_device_train_batch_size=6,
                     use_cpu=True, max_length=None)
    trainer, theirs_model = _with_new_adapter(KTOTrainer, theirs_model, args=args, train_dataset=data,
                                              processing_class=tokenizer)
    assert float(ours[0]) != 0.5  # a non-trivial point: the policy differs from the reference
    _compare(ours, _trl_loss(trainer, theirs_model, examples), theirs_model)
