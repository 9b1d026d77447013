"""tt's LoRA bank (`serve/lora_bank.py`) against PEFT, on a tiny Llama base, float32 on CPU.

Three adapters made by PEFT with random A and B (`init_lora_weights=False`, so every product counts): r 8 on every
Linear, r 4 on q_proj and v_proj only, r 2 with rsLoRA on three other projections. The bank's logits for a mixed
batch equal each adapter's own PEFT model's (`PeftModel.from_pretrained`, that adapter alone) row by row within
float32 rounding, and a pass whose rows all use one adapter gives PEFT's bits exactly. A freed slot is zeroed:
its successor answers as itself. What the bank cannot apply exactly is refused, naming the setting.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from tt_engine_adapter.serve.lora_bank import LoraBank, Refused

SHAPES = {  # name -> LoraConfig settings
    "every": dict(r=8, lora_alpha=16, target_modules="all-linear"),
    "qv": dict(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
    "rs": dict(r=2, lora_alpha=4, use_rslora=True, target_modules=["o_proj", "gate_proj", "down_proj"]),
}


def _base_model(base: Path):
    from tt_engine_adapter.runtime import model_source

    return model_source.load_model(str(base), "cpu", torch.float32).eval()


def make_adapter(base: Path, folder: Path, seed: int, **settings) -> Path:
    """A PEFT LoRA adapter of `base` with random A and B, saved as the train stage saves one."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(seed)
    model = get_peft_model(_base_model(base), LoraConfig(task_type="CAUSAL_LM", init_lora_weights=False, **settings))
    model.save_pretrained(str(folder), safe_serialization=True)
    return folder


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    from tt_engine_adapter.testing.tiny_model import build

    root = tmp_path_factory.mktemp("bank")
    base = build(root / "base", arch="llama", hidden=64, layers=2)
    return base, {name: make_adapter(base, root / name, seed, **settings)
                  for seed, (name, settings) in enumerate(SHAPES.items())}


def _peft_logits(base: Path, folder: Path, ids: torch.Tensor) -> torch.Tensor:
    from peft import PeftModel

    model = PeftModel.from_pretrained(_base_model(base), str(folder), is_trainable=False).eval()
    with torch.inference_mode():
        return model(input_ids=ids).logits


def _bank_logits(model, bank: LoraBank, slots: list[int], ids: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode(), bank.rows(slots):
        return model(input_ids=ids).logits


def test_the_bank_answers_a_mixed_batch_as_peft_answers_each_adapter_alone(made):
    base, folders = made
    model = _base_model(base)
    bank = LoraBank(model, slots=2)  # grows to a third slot
    slot = {name: bank.install(bank.read(folder)) for name, folder in folders.items()}
    assert slot == {"every": 0, "qv": 1, "rs": 2} and bank.capacity == 4
    torch.manual_seed(7)
    for rows, length in [(["every", "qv", "rs"], 6), (["rs", "every", "qv", "every"], 1)]:  # a prefill, a step
        ids = torch.randint(0, 200, (len(rows), length))
        peft = {name: _peft_logits(base, folders[name], ids) for name in set(rows)}
        mixed = _bank_logits(model, bank, [slot[name] for name in rows], ids)
        with torch.inference_mode():
            plain = model(input_ids=ids).logits  # no pass: the base alone
        outputs = [plain] + list(peft.values())
        assert all(not torch.allclose(x, y, atol=1e-3) for j, x in enumerate(outputs) for y in outputs[j + 1:])
        for i, name in enumerate(rows):
            torch.testing.assert_close(mixed[i], peft[name][i], rtol=1e-5, atol=1e-5, msg=f"row {i} ({name})")
        for name in set(rows):  # every row one adapter: PEFT's own ops, PEFT's bits
            assert torch.equal(_bank_logits(model, bank, [slot[name]] * len(rows), ids), peft[name]), name


def test_a_freed_slot_is_zeroed_and_never_answers_for_its_successor(made):
    base, folders = made
    model = _base_model(base)
    bank = LoraBank(model, slots=2)
    first = bank.install(bank.read(folders["every"]))  # targets every Linear
    other = bank.install(bank.read(folders["rs"]))
    bank.free(first)
    successor = bank.install(bank.read(folders["qv"]))  # targets q_proj and v_proj only
    assert successor == first and bank.occupied == [0, 1]
    ids = torch.randint(0, 200, (2, 5), generator=torch.Generator().manual_seed(3))
    qv, rs = _peft_logits(base, folders["qv"], ids), _peft_logits(base, folders["rs"], ids)
    assert torch.equal(_bank_logits(model, bank, [successor] * 2, ids), qv)
    mixed = _bank_logits(model, bank, [successor, other], ids)
    torch.testing.assert_close(mixed[0], qv[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(mixed[1], rs[1], rtol=1e-5, atol=1e-5)
    bank.free(other)
    with pytest.raises(RuntimeError, match=r"slots \[1\] hold no adapter"):
        bank.rows([successor, other]).__enter__()


def _edited(folder: Path, tmp_path: Path, config=None, tensors=None) -> Path:
    from safetensors.torch import load_file, save_file

    copy = tmp_path / "edited"
    shutil.copytree(folder, copy)
    if config:
        path = copy / "adapter_config.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), **config}))
    if tensors:
        path = copy / "adapter_model.safetensors"
        save_file(tensors(load_file(str(path))), str(path))
    return copy


_A = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"
REFUSALS = [  # (what is changed, the words the refusal must name)
    ({"use_dora": True}, "DoRA"),
    ({"modules_to_save": ["lm_head"]}, "modules_to_save"),
    ({"bias": "lora_only"}, "bias 'lora_only'"),
    ({"fan_in_fan_out": True}, "fan_in_fan_out"),
    ({"layers_to_transform": [0]}, "layers_to_transform"),
    ({"rank_pattern": {"q_proj": 2}}, "rank_pattern"),
    ({"alpha_pattern": {"q_proj": 2}}, "alpha_pattern"),
    ({"some_future_variant": {"on": 1}}, "some_future_variant"),
    ({"peft_type": "LOHA"}, "not a LoRA adapter"),
    (lambda t: {**t, "base_model.model.model.embed_tokens.lora_A.weight": t[_A].clone()}, "'model.embed_tokens' is a Embedding"),
    (lambda t: {**t, "base_model.model.model.norm.weight": t[_A].clone()}, "not a LoRA A or B"),
    (lambda t: {**t, _A: t[_A][:, :-1].contiguous()}, "needs (4, 64)"),
    (lambda t: {k: v for k, v in t.items() if k != _A}, "lora_A missing"),
]


@pytest.mark.parametrize("change,words", REFUSALS, ids=[w for _, w in REFUSALS])
def test_what_the_bank_cannot_apply_exactly_is_refused_naming_it(made, tmp_path, change, words):
    base, folders = made
    folder = _edited(folders["qv"], tmp_path, **({"tensors": change} if callable(change) else {"config": change}))
    bank = LoraBank(_base_model(base))
    with pytest.raises(Refused) as caught:
        bank.read(folder)
    assert words in str(caught.value)
    assert bank.occupied == [] and bank.sites == {}
