"""Bench: the adapter engine's CUDA path (bf16) on a small real architecture, on any CUDA machine.

    <adapter env (runtime + bench groups)>/bin/python bench/adapter_cuda.py [--layers 28] [--small]

Builds a randomly initialised model with Qwen3-0.6B's shapes (hidden 1024,
28 layers, 16 heads / 8 KV heads, head_dim 128, vocabulary 151,936; the
tokenizer is the tiny locally trained one, so no hub is needed), then, in
bf16 on the GPU: LoRA training through tt's loop and through TRL's
SFTTrainer (when TRL is installed) on the same rows and settings, and batched
versus one-at-a-time evaluation. `--small` shrinks the model so the script
can be smoke-tested on CPU. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

LONG_SYSTEM = ("You label movie reviews. " * 15).strip()  # ~250 tokens: no truncation for either trainer


def build_model(folder: Path, layers: int, small: bool) -> Path:
    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config

    from tt_engine_adapter.testing.tiny_model import SPECIALS, build_tokenizer

    tok = build_tokenizer("qwen3")
    dims = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                vocab_size=1024) if small else \
        dict(hidden_size=1024, intermediate_size=3072, num_attention_heads=16, num_key_value_heads=8, head_dim=128,
             vocab_size=151936)
    config = Qwen3Config(num_hidden_layers=layers, max_position_embeddings=4096, tie_word_embeddings=True,
                         eos_token_id=tok.convert_tokens_to_ids(SPECIALS["qwen3"]["eos"]),
                         pad_token_id=tok.convert_tokens_to_ids(SPECIALS["qwen3"]["pad"]), **dims)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=28)
    parser.add_argument("--rows", type=int, default=512)
    parser.add_argument("--small", action="store_true", help="tiny dims, for a CPU smoke test")
    args = parser.parse_args()
    import torch

    from adapter_train_vs_trl import rows_for, run_trl, run_tt
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tt_engine_adapter.runtime.generate import generate

    device = "cuda" if torch.cuda.is_available() else "cpu"
    hp = {"n_epochs": 1, "max_steps": None, "learning_rate": 2e-4, "batch_size": 16,
          "gradient_accumulation_steps": 2, "lora_rank": 16, "lora_alpha": 32.0, "lora_dropout": 0.0,
          "lora_target_modules": "all-linear", "max_seq_length": 512, "warmup_ratio": 0.0,
          "lr_scheduler": "constant", "weight_decay": 0.0, "max_grad_norm": 1.0, "seed": 7,
          "checkpoint_interval_steps": 10**9, "keep_checkpoints": 1}
    out: dict = {"device": device, "gpu": torch.cuda.get_device_name(0) if device == "cuda" else None,
                 "bf16": device == "cuda" and torch.cuda.is_bf16_supported(), "layers": args.layers,
                 "small": args.small, "torch": torch.__version__}
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_model(Path(tmp) / "m", args.layers, args.small)
        rows = rows_for(args.rows, LONG_SYSTEM)
        tt_run = run_tt(model_dir, rows, hp, device)
        out["train_tt"] = {"tokens_per_second": round(tt_run["tokens_per_second"], 1),
                           "seconds": round(tt_run["seconds"], 2), "first_loss": tt_run["losses"][0],
                           "last_loss": tt_run["losses"][-1]}
        try:
            trl_run = run_trl(model_dir, rows, hp, device)
            out["train_trl"] = {"tokens_per_second": round(trl_run["tokens_per_second"], 1),
                                "seconds": round(trl_run["seconds"], 2), "first_loss": trl_run["losses"][0],
                                "last_loss": trl_run["losses"][-1]}
            out["ratio_tt_over_trl"] = round(tt_run["tokens_per_second"] / trl_run["tokens_per_second"], 3)
        except ImportError as exc:
            out["train_trl"] = f"skipped: {exc}"
        tok = AutoTokenizer.from_pretrained(model_dir)
        dtype = torch.bfloat16 if out["bf16"] else torch.float32
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).to(device).eval()
        prompts = [{"id": r["id"], "messages": r["messages"][:2]} for r in rows[:64]]
        settings = dict(max_new_tokens=32, max_seq_length=hp["max_seq_length"], device=device)
        generate(model, tok, prompts[:4], batch_size=4, **settings)
        timings = {}
        for name, batch in (("one_at_a_time", 1), ("batch_16", 16), ("batch_64", 64)):
            if device == "cuda":
                torch.cuda.synchronize()
            started = time.perf_counter()
            generate(model, tok, prompts, batch_size=batch, **settings)
            if device == "cuda":
                torch.cuda.synchronize()
            timings[name] = round(len(prompts) / (time.perf_counter() - started), 2)
        out["eval_prompts_per_second"] = timings
        out["eval_speedup_batch_16"] = round(timings["batch_16"] / timings["one_at_a_time"], 2)
    print("RESULT " + json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
