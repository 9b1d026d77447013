"""Bench: tt adapter training throughput against TRL's SFTTrainer + PEFT, same run, same everything.

Run in an adapter engine env that also has the `bench` group (TRL):

    cd plugins/adapter && UV_PROJECT_ENVIRONMENT=/tmp/tt-bench/adapter uv sync --locked --group runtime --group bench
    /tmp/tt-bench/adapter/bin/python bench/adapter_train_vs_trl.py [--device cpu|cuda] [--hidden 128] [--layers 2]

Both trainers get the same tiny Llama-style model (built locally), the same
chat rows rendered with the same template (TRL: conversational
prompt-completion, loss on the completion only), the same LoRA settings
(all linear layers), the same effective batch (micro-batch x accumulation),
constant learning rate, AdamW, clipping and seed. Throughput = non-pad tokens
fed to the model / wall seconds of the training loop (tokenization and model
loading excluded for both). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def rows_for(n: int, system: str) -> list[dict]:
    from tt_engine_adapter.testing.tiny_model import sentiment_examples

    return [{"id": f"r{i}", "messages": [{"role": "system", "content": system}, {"role": "user", "content": e["input"]},
                                         {"role": "assistant", "content": e["output"]}]}
            for i, e in enumerate(sentiment_examples(n, seed=1))]


def run_tt(model_dir: Path, rows: list[dict], hp: dict, device: str) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tt_engine_adapter.runtime import chat
    from tt_engine_adapter.runtime import train as loop
    from tt_engine_adapter.runtime.data import encode_rows

    from tt_engine_adapter.runtime.config import AdapterSettings

    tok = AutoTokenizer.from_pretrained(model_dir)
    encoded = encode_rows(tok, rows, hp["max_seq_length"])
    hp = AdapterSettings(**hp)  # the training loop reads the typed stage config
    torch.manual_seed(hp.seed)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = loop.wrap_lora(AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).to(device), hp)
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        state = loop.train(model, encoded, hp, pad_id=chat.pad_token_id(tok), device=device,
                           autocast_dtype=torch.bfloat16 if device == "cuda" else None,
                           checkpoint_dir=Path(tmp) / "ck", stage_fingerprint="bench", resume=False)
        wall = time.perf_counter() - started
    return {"tokens": state.tokens, "seconds": wall, "tokens_per_second": state.tokens / wall,
            "losses": [loss for _, loss in state.losses]}


def run_trl(model_dir: Path, rows: list[dict], hp: dict, device: str) -> dict:
    import datasets
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    datasets.disable_progress_bars()
    tok = AutoTokenizer.from_pretrained(model_dir)
    data = Dataset.from_list([{"prompt": r["messages"][:2], "completion": r["messages"][2:]} for r in rows])
    torch.manual_seed(hp["seed"])
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype)
    with tempfile.TemporaryDirectory() as tmp:
        config = SFTConfig(
            output_dir=tmp, per_device_train_batch_size=hp["batch_size"],
            gradient_accumulation_steps=hp["gradient_accumulation_steps"], num_train_epochs=hp["n_epochs"],
            learning_rate=hp["learning_rate"], lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
            max_grad_norm=hp["max_grad_norm"], logging_steps=1, save_strategy="no", report_to=[], seed=hp["seed"],
            max_length=hp["max_seq_length"], packing=False, completion_only_loss=True, dataloader_num_workers=0,
            use_cpu=device == "cpu", bf16=device == "cuda", disable_tqdm=True, optim="adamw_torch",
            dataset_num_proc=None,
        )
        peft_config = LoraConfig(r=hp["lora_rank"], lora_alpha=hp["lora_alpha"], lora_dropout=hp["lora_dropout"],
                                 target_modules=hp["lora_target_modules"], bias="none", task_type="CAUSAL_LM")
        trainer = SFTTrainer(model=model, args=config, train_dataset=data, processing_class=tok,
                             peft_config=peft_config)
        tokens_per_epoch = sum(len(ids) for ids in trainer.train_dataset["input_ids"])
        supervised = sum(sum(1 for x in labels if x != -100) for labels in trainer.train_dataset["labels"])
        started = time.perf_counter()
        trainer.train()
        wall = time.perf_counter() - started
        losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    tokens = tokens_per_epoch * hp["n_epochs"]
    return {"tokens": tokens, "seconds": wall, "tokens_per_second": tokens / wall, "losses": losses,
            "supervised_tokens_per_epoch": supervised}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    import torch

    from tt_engine_adapter.runtime.data import encode_rows
    from tt_engine_adapter.testing.tiny_model import build
    from transformers import AutoTokenizer

    if os.environ.get("TT_NUM_THREADS"):
        torch.set_num_threads(int(os.environ["TT_NUM_THREADS"]))
    hp = {"n_epochs": args.epochs, "max_steps": None, "learning_rate": 2e-3, "batch_size": 8,
          "gradient_accumulation_steps": 2, "lora_rank": 8, "lora_alpha": 16.0, "lora_dropout": 0.0,
          "lora_target_modules": "all-linear", "max_seq_length": 128, "warmup_ratio": 0.0,
          "lr_scheduler": "constant", "weight_decay": 0.0, "max_grad_norm": 1.0, "seed": 7,
          "checkpoint_interval_steps": 10**9, "keep_checkpoints": 1}
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build(Path(tmp) / "m", arch="llama", hidden=args.hidden, layers=args.layers)
        rows = rows_for(args.rows, "Classify the sentiment of the review.")
        tok = AutoTokenizer.from_pretrained(model_dir)
        supervised = sum(e.supervised for e in encode_rows(tok, rows, hp["max_seq_length"]))
        results = {"tt": [], "trl": []}
        for _ in range(args.repeats):  # interleaved, so background load hits both alike
            results["tt"].append(run_tt(model_dir, rows, hp, args.device))
            results["trl"].append(run_trl(model_dir, rows, hp, args.device))
    # best of the interleaved repeats: on a shared machine, background load only ever slows a run down
    tt_tps = max(r["tokens_per_second"] for r in results["tt"])
    trl_tps = max(r["tokens_per_second"] for r in results["trl"])
    tt_loss, trl_loss = results["tt"][0]["losses"], results["trl"][0]["losses"]
    third = max(1, len(tt_loss) // 3)
    summary = {
        "device": args.device, "hidden": args.hidden, "layers": args.layers, "rows": args.rows,
        "epochs": args.epochs, "effective_batch": hp["batch_size"] * hp["gradient_accumulation_steps"],
        "steps": len(tt_loss), "trl_steps": len(trl_loss),
        "tokens_per_epoch": {"tt": results["tt"][0]["tokens"] // args.epochs,
                             "trl": results["trl"][0]["tokens"] // args.epochs},
        "supervised_tokens_per_epoch": {"tt": supervised, "trl": results["trl"][0]["supervised_tokens_per_epoch"]},
        "tokens_per_second": {"tt": round(tt_tps, 1), "trl": round(trl_tps, 1)},
        "ratio_tt_over_trl": round(tt_tps / trl_tps, 3),
        "loss_first_third_mean": {"tt": round(statistics.mean(tt_loss[:third]), 4),
                                  "trl": round(statistics.mean(trl_loss[:third]), 4)},
        "loss_last_third_mean": {"tt": round(statistics.mean(tt_loss[-third:]), 4),
                                 "trl": round(statistics.mean(trl_loss[-third:]), 4)},
        "loss_curve_every_4_steps": {"tt": [round(x, 3) for x in tt_loss[::4]],
                                     "trl": [round(x, 3) for x in trl_loss[::4]]},
        "runs_seconds": {k: [round(r["seconds"], 2) for r in v] for k, v in results.items()},
    }
    print("RESULT " + json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
