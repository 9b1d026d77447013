"""Bench: adapter training throughput with packing vs right-padding, and vs TRL's SFTTrainer with packing=True.

Run in an adapter engine env that also has the `bench` group (TRL):

    cd plugins/adapter && UV_PROJECT_ENVIRONMENT=/tmp/tt-bench/adapter uv sync --locked --group runtime --group bench --compile-bytecode
    TT_NUM_THREADS=2 /tmp/tt-bench/adapter/bin/python bench/adapter_packing.py [--rows 256] [--epochs 1]

All three runs get the same tiny Llama-style model (built locally), the same
rows — short-answer chats whose user text varies from one to eight sentences,
the case packing is for — rendered by the same chat template (TRL:
conversational prompt-completion, loss on the completion only), the same LoRA
(all linear layers), micro-batch, constant learning rate, AdamW, clipping and
seed, `max_seq_length` 512. tt packs each micro-batch's rows into sequences of
at most 512 tokens (position ids reset per row, block-diagonal attention);
TRL packs with its default `bfd` strategy (padding-free: position ids, no
attention mask). Throughput = row tokens (pad excluded) / wall seconds of the
training loop (tokenization and model loading excluded). Prints one JSON line,
and one progress line per run on stderr.

Why `--rows 256` never finished: it asked sentiment_examples for 2,048
distinct reviews of the 1,728 there are (an endless loop). Why runs crawled: with PYTHONDONTWRITEBYTECODE=1 and an env synced
without `--compile-bytecode`, every start recompiles torch/transformers/peft/
TRL from source (40-75 s); and two OpenMP threads on a loaded 2-core machine
spin-wait on each other (steps 0.1 s -> 6.5 s at hidden 64). OMP_WAIT_POLICY
defaults to PASSIVE here so load slows every run alike instead of at random.
And TRL 1.x's SFTConfig defaults to bf16=True and gradient_checkpointing=True:
bf16 autocast on a CPU without bf16 units made its step ~10x slower (one
step over 16 rows: 12.1 s -> 1.4 s); both are now set as tt's run has them.
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
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch is imported

SYSTEM = "Classify the sentiment of the review."


def rows_for(n: int) -> list[dict]:
    from tt_engine_adapter.testing.tiny_model import sentiment_examples

    # a pool, reused round-robin: sentiment_examples has 1,728 distinct reviews and would loop forever
    # asked for more (the old `n * 8` hung at --rows 256); rows up to --rows 128 are as before
    examples = sentiment_examples(min(n * 8, 1024), seed=1)
    rows = []
    for i in range(n):
        parts = [examples[(i * 8 + j) % len(examples)] for j in range(1 + (i * 5) % 8)]  # 1..8 sentences
        rows.append({"id": f"r{i}", "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": ". ".join(p["input"] for p in parts)},
            {"role": "assistant", "content": parts[-1]["output"]}]})
    return rows


def run_tt(model_dir: Path, rows: list[dict], hp, packing: bool) -> dict:
    import dataclasses

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tt_engine_adapter.runtime import chat
    from tt_engine_adapter.runtime import train as loop
    from tt_engine_adapter.runtime.data import encode_rows

    hp = dataclasses.replace(hp, packing=packing)
    tok = AutoTokenizer.from_pretrained(model_dir)
    encoded = encode_rows(tok, rows, hp.max_seq_length)
    torch.manual_seed(hp.seed)
    model = loop.wrap_lora(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32), hp)
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        state = loop.train(model, encoded, hp, pad_id=chat.pad_token_id(tok), device="cpu", autocast_dtype=None,
                           checkpoint_dir=Path(tmp) / "ck", stage_fingerprint="bench", resume=False)
        wall = time.perf_counter() - started
    return {"tokens": state.tokens, "seconds": round(wall, 3), "tokens_per_second": round(state.tokens / wall, 1),
            "pad_tokens": state.padding["pad_tokens"], "first_loss": state.losses[0][1]}


def run_trl(model_dir: Path, rows: list[dict], hp) -> dict:
    import datasets
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    datasets.disable_progress_bars()
    tok = AutoTokenizer.from_pretrained(model_dir)
    data = Dataset.from_list([{"prompt": r["messages"][:2], "completion": r["messages"][2:]} for r in rows])
    torch.manual_seed(hp.seed)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    with tempfile.TemporaryDirectory() as tmp:
        config = SFTConfig(
            output_dir=tmp, per_device_train_batch_size=hp.batch_size, num_train_epochs=hp.n_epochs,
            learning_rate=hp.learning_rate, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
            max_grad_norm=hp.max_grad_norm, logging_steps=1, save_strategy="no", report_to=[], seed=hp.seed,
            max_length=hp.max_seq_length, packing=True, completion_only_loss=True, dataloader_num_workers=0,
            use_cpu=True, disable_tqdm=True, optim="adamw_torch", dataset_num_proc=None,
            # TRL 1.x defaults both on; tt's run is fp32 without recomputation (bf16 autocast on a CPU
            # without bf16 units made TRL's step ~10x slower and measured something else)
            bf16=False, fp16=False, gradient_checkpointing=hp.gradient_checkpointing,
        )
        peft_config = LoraConfig(r=hp.lora_rank, lora_alpha=hp.lora_alpha, lora_dropout=hp.lora_dropout,
                                 target_modules=hp.target_modules, bias="none", task_type="CAUSAL_LM")
        trainer = SFTTrainer(model=model, args=config, train_dataset=data, processing_class=tok,
                             peft_config=peft_config)
        tokens = sum(len(ids) for ids in trainer.train_dataset["input_ids"]) * hp.n_epochs
        started = time.perf_counter()
        trainer.train()
        wall = time.perf_counter() - started
    return {"tokens": tokens, "seconds": round(wall, 3), "tokens_per_second": round(tokens / wall, 1),
            "steps": trainer.state.global_step}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-trl", action="store_true", help="tt only (an env without the bench group)")
    args = parser.parse_args()
    import torch

    from tt_engine_adapter.runtime.config import AdapterSettings
    from tt_engine_adapter.testing.tiny_model import build

    if os.environ.get("TT_NUM_THREADS"):
        torch.set_num_threads(int(os.environ["TT_NUM_THREADS"]))
    hp = AdapterSettings(n_epochs=args.epochs, learning_rate=2e-3, batch_size=8, lora_rank=8, lora_alpha=16.0,
                         lora_dropout=0.0, max_seq_length=512, warmup_ratio=0.0, lr_scheduler="constant", seed=7,
                         checkpoint_interval_steps=10**9, keep_checkpoints=1)
    results: dict[str, list] = {"tt_padded": [], "tt_packed": [], "trl_packed": []}
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build(Path(tmp) / "m", arch="llama", hidden=args.hidden, layers=args.layers)
        rows = rows_for(args.rows)
        for repeat in range(args.repeats):  # interleaved, so background load hits all alike
            for name in ("tt_padded", "tt_packed", "trl_packed"):
                if name == "trl_packed" and args.no_trl:
                    continue
                started = time.perf_counter()
                result = (run_trl(model_dir, rows, hp) if name == "trl_packed"
                          else run_tt(model_dir, rows, hp, packing=name == "tt_packed"))
                results[name].append(result)
                print(f"repeat {repeat + 1} {name}: {result} ({time.perf_counter() - started:.1f} s with setup)",
                      file=sys.stderr, flush=True)
    best = {k: max(v, key=lambda r: r["tokens_per_second"]) for k, v in results.items() if v}
    summary = {
        "rows": args.rows, "epochs": args.epochs, "hidden": args.hidden, "layers": args.layers,
        "threads": torch.get_num_threads(),
        "tokens_per_second": {k: r["tokens_per_second"] for k, r in best.items()},
        "pad_tokens": {k: r.get("pad_tokens") for k, r in best.items() if "pad_tokens" in r},
        "first_step_loss": {k: r["first_loss"] for k, r in best.items() if "first_loss" in r},
        "runs_seconds": {k: [r["seconds"] for r in v] for k, v in results.items() if v},
    }
    print("RESULT " + json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
