"""The GPT: HF Llama names and shapes, causality, KV-cache decoding equals a full forward, batched = unbatched;
with qk_norm, HF Qwen3's names, config and logits; a model folder without the field loads as Llama."""

import math

import pytest
import torch

from tt_engine_foundation.runtime.generate import generate
from tt_engine_foundation.runtime.model import GPT, KVCache, config_for_depth, hf_config


def _model(depth=2, vocab=97, seq=32, seed=0, qk_norm=False):
    torch.manual_seed(seed)
    model = GPT(config_for_depth(depth, vocab, seq, qk_norm))
    model.init_weights(seed)
    with torch.no_grad():  # make every weight non-trivial (init zeroes the residual outputs)
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())) * 0.05)
    return model.eval()


def test_llama_parameter_names_and_shapes():
    model = _model(depth=2, vocab=300)
    names = dict((k, tuple(v.shape)) for k, v in model.state_dict().items())
    width, inter = 128, 384
    expected = {"model.embed_tokens.weight": (300, width), "model.norm.weight": (width,), "lm_head.weight": (300, width)}
    for i in range(2):
        p = f"model.layers.{i}."
        expected.update({
            p + "self_attn.q_proj.weight": (width, width), p + "self_attn.k_proj.weight": (width, width),
            p + "self_attn.v_proj.weight": (width, width), p + "self_attn.o_proj.weight": (width, width),
            p + "mlp.gate_proj.weight": (inter, width), p + "mlp.up_proj.weight": (inter, width),
            p + "mlp.down_proj.weight": (width, inter),
            p + "input_layernorm.weight": (width,), p + "post_attention_layernorm.weight": (width,),
        })
    assert names == expected
    cfg = hf_config(model.cfg)
    assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["num_attention_heads"] == 2
    assert cfg["tie_word_embeddings"] is False and cfg["attention_bias"] is False and cfg["mlp_bias"] is False


def test_depth_sets_width_heads():
    for depth in (1, 4, 12):
        cfg = config_for_depth(depth, 1000, 64)
        assert cfg.hidden_size == 64 * depth and cfg.num_attention_heads == depth and cfg.head_dim == 64


def test_causal_and_deterministic_init():
    a, b = _model(seed=3), _model(seed=3)
    for (ka, va), (kb, vb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert ka == kb and torch.equal(va, vb)
    x = torch.randint(0, 97, (2, 16))
    y = x.clone()
    y[:, 10:] = (y[:, 10:] + 1) % 97
    with torch.no_grad():
        assert torch.allclose(a(x)[:, :10], a(y)[:, :10], atol=1e-6)


def test_kv_cache_decoding_matches_full_forward():
    model = _model()
    x = torch.randint(0, 97, (2, 12))
    with torch.no_grad():
        full = model(x)
        cache = KVCache(model.cfg, 2, 12, torch.device("cpu"), torch.float32)
        steps = [model(x[:, :5], cache=cache)]
        for t in range(5, 12):
            steps.append(model(x[:, t : t + 1], cache=cache))
    assert torch.allclose(torch.cat(steps, dim=1), full, atol=1e-5)


def test_batched_left_padded_generation_equals_one_by_one():
    model = _model()
    prompts = [[1, 5, 7, 9, 11, 2], [3, 4], [8, 8, 8, 1]]
    batched = generate(model, prompts, 6, stop_id=96, pad_id=0, device=torch.device("cpu"))
    for prompt, out in zip(prompts, batched):
        assert generate(model, [prompt], 6, stop_id=96, pad_id=0, device=torch.device("cpu"))[0] == out
        # and greedy decoding without a cache gives the same tokens
        seq = list(prompt)
        with torch.no_grad():
            for _ in range(len(out)):
                seq.append(int(model(torch.tensor([seq]))[0, -1].argmax()))
        assert seq[len(prompt):] == out


def test_matches_transformers_llama_when_available(tmp_path):
    transformers = pytest.importorskip("transformers")
    from safetensors.torch import save_file

    model = _model(depth=2, vocab=97)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(tmp_path / "model.safetensors"))
    import json

    (tmp_path / "config.json").write_text(json.dumps(hf_config(model.cfg)))
    hf = transformers.LlamaForCausalLM.from_pretrained(str(tmp_path), dtype=torch.float32).eval()
    x = torch.randint(0, 97, (2, 20))
    with torch.no_grad():
        ours, theirs = model(x), hf(x).logits
    assert torch.allclose(ours, theirs, atol=1e-4), (ours - theirs).abs().max()


def test_qk_norm_is_qwen3_layout_and_math(tmp_path):
    """Qwen3ForCausalLM loads the weights with hf_config's config.json (strictly: no weight missing or unused)
    and computes the same logits; the KV cache decodes as a full forward."""
    import json

    import transformers
    from safetensors.torch import save_file

    model = _model(depth=2, vocab=97, qk_norm=True)
    names = dict((k, tuple(v.shape)) for k, v in model.state_dict().items())
    assert {k: v for k, v in names.items() if "_norm." in k} == {
        f"model.layers.{i}.self_attn.{n}_norm.weight": (64,) for i in range(2) for n in "qk"}
    cfg = hf_config(model.cfg)
    assert (cfg["architectures"], cfg["model_type"], cfg["head_dim"]) == (["Qwen3ForCausalLM"], "qwen3", 64)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    hf, info = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path), dtype=torch.float32,
                                                                 output_loading_info=True)
    assert type(hf).__name__ == "Qwen3ForCausalLM" and hf.config.rope_parameters["rope_theta"] == model.cfg.rope_theta
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    x = torch.randint(0, 97, (2, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ours, theirs = model(x), hf.eval()(x).logits
        assert (ours - theirs).abs().max() < 1e-4
        cache = KVCache(model.cfg, 2, 20, torch.device("cpu"), torch.float32)
        steps = [model(x[:, :7], cache=cache)] + [model(x[:, t : t + 1], cache=cache) for t in range(7, 20)]
    assert torch.allclose(torch.cat(steps, dim=1), ours, atol=1e-5)


def test_a_model_folder_without_qk_norm_loads_as_llama(tmp_path):
    """Folders written before foundation.qk_norm have no such field in tt-model.json: Llama, as they were."""
    import json

    from tt_engine_foundation.runtime.model_io import load_model_dir, save_model_dir

    (tmp_path / "tokenizer.json").write_text("{}")
    model = _model(depth=1, vocab=97)
    folder = save_model_dir(tmp_path / "model", model, tmp_path / "tokenizer.json", "foundation-base", {})
    meta = json.loads((folder / "tt-model.json").read_text())
    assert meta["model"].pop("qk_norm") is False
    (folder / "tt-model.json").write_text(json.dumps(meta))
    loaded = load_model_dir(folder, "cpu")
    assert loaded.cfg.qk_norm is False and set(loaded.state_dict()) == set(model.state_dict())
    x = torch.randint(0, 97, (1, 9))
    with torch.no_grad():
        assert torch.equal(loaded.eval()(x), model(x))
    qk = _model(depth=1, vocab=97, qk_norm=True)
    folder = save_model_dir(tmp_path / "qk", qk, tmp_path / "tokenizer.json", "foundation-base", {})
    assert json.loads((folder / "config.json").read_text())["model_type"] == "qwen3"
    assert load_model_dir(folder, "cpu").cfg.qk_norm is True


def test_flops_estimate_matches_torch_flop_counter():
    """flops_per_token against torch.utils.flop_counter over a real forward + backward (attention on the math
    path, so its matmuls are counted, the full T x T as in the estimate). The estimate counts 6 FLOPs per norm
    weight, which is no matmul: within 0.2 % here."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    model = _model(depth=2, vocab=300).train()
    batch, seq = 2, 32
    ids = torch.randint(0, 300, (batch, seq), generator=torch.Generator().manual_seed(0))
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(ids).float().sum().backward()
    measured = counter.get_total_flops() / (batch * seq)
    estimate = model.flops_per_token(seq)
    assert math.isfinite(estimate) and abs(measured - estimate) <= 0.002 * estimate, (measured, estimate)


def _saved_bytes_loss_grads(model, idx):
    """Loss, gradients and the bytes autograd keeps for the backward pass (saved_tensors_hooks)."""
    saved = []

    def pack(t):
        saved.append(t.numel() * t.element_size())
        return t

    model.zero_grad(set_to_none=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logits = model(idx[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), idx[:, 1:].reshape(-1))
    loss.backward()
    return loss.item(), {n: p.grad.clone() for n, p in model.named_parameters()}, sum(saved)


def test_gradient_checkpointing_same_loss_and_gradients_less_saved():
    model = _model(depth=2, vocab=97, seq=32).train()
    idx = torch.randint(0, 97, (2, 32), generator=torch.Generator().manual_seed(3))
    loss, grads, plain_bytes = _saved_bytes_loss_grads(model, idx)
    model.gradient_checkpointing = True
    loss_ckpt, grads_ckpt, ckpt_bytes = _saved_bytes_loss_grads(model, idx)
    assert loss_ckpt == pytest.approx(loss, rel=1e-6, abs=1e-6)
    for name, grad in grads.items():
        torch.testing.assert_close(grads_ckpt[name], grad, rtol=1e-5, atol=1e-6, msg=name)
    assert ckpt_bytes < plain_bytes / 2, (ckpt_bytes, plain_bytes)
