"""Bench: the adapter's train stage with 1 process, N DDP ranks and N sharded (FSDP2) ranks on one machine.

    plugins/adapter/.venv/bin/python bench/adapter_sharded.py [--base DIR] [--device cpu|cuda] [--nproc 2]
                                                              [--steps 6] [--seq 256]

The base defaults to the real SmolLM2-135M (`scripts/real-base`); `--tiny` uses the test suite's tiny Llama.
Each configuration is the real train stage started as the host starts it (torchrun through
`tt_stagekit.launcher`, the adapter test harness's request), on the same prepared rows, LoRA r 16 on every
linear layer, lora_dropout 0. Prints, per configuration, `train.sharded_bytes_per_rank` (parameter + optimizer
bytes the fullest rank holds), `train.peak_host_bytes_per_node` (the node's ranks' peak resident sets summed),
`train.peak_device_bytes_per_rank` (CUDA: torch's peak allocation, the largest rank), tokens/s, the final loss
and the stage's wall time, then one RESULT line of JSON.

CUDA: `--device cuda --nproc N` needs N GPUs (one per rank, NCCL); with one GPU only the 1-process row runs.
On CPU the ranks use gloo and TT_NUM_THREADS threads each (default 1).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def stage(run, hp: dict, device: str) -> dict:
    from tt_engine_adapter.testing.harness import MODULES
    from tt_stagekit.launcher import stage_arguments

    run.spec["hyperparameters"].update(hp)
    request = run.request("train", False, device)
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, *stage_arguments(run.spec["hyperparameters"], MODULES["train"]),
                           str(request)], cwd=run.run_dir, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(proc.stdout[-3000:] + proc.stderr[-3000:])
    metrics = json.loads((run.run_dir / "train" / "result.json").read_text())["metrics"]
    keys = ("train.world_size", "train.sharded_bytes_per_rank", "train.peak_host_bytes_per_node",
            "train.peak_device_bytes_per_rank", "train.tokens_per_second", "train.final_loss")
    return {**{k.removeprefix("train."): metrics.get(k) for k in keys}, "stage_seconds": round(seconds, 1)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", help="a base model folder (default: scripts/real-base)")
    parser.add_argument("--tiny", action="store_true", help="the test suite's tiny Llama instead")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--seq", type=int, default=256)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TT_NUM_THREADS", "1")
    from tt_engine_adapter.testing.harness import sentiment_run

    tmp = Path(tempfile.mkdtemp(prefix="tt-bench-sharded-"))
    if args.tiny:
        from tt_engine_adapter.testing.tiny_model import build

        base = build(tmp / "tiny", arch="llama", hidden=64, layers=2)
    else:
        base = args.base or subprocess.run([str(REPO / "scripts" / "real-base")], capture_output=True, text=True,
                                           check=True).stdout.strip()
    batch = 4 * args.nproc
    hp = {"max_steps": args.steps, "n_epochs": 100, "batch_size": batch, "lora_rank": 16, "lora_dropout": 0.0,
          "max_seq_length": args.seq, "checkpoint_interval_steps": 1000, "precision": "auto"}
    first = sentiment_run(tmp / "prepared", str(base), hp, n_train=4 * batch, n_eval=4)
    first.stage("prepare", device=args.device)
    first.stage("prefetch", device=args.device)
    rows = []
    configurations = [("1 process", {"nproc_per_node": 1, "sharding": "none"})]
    if args.device == "cpu" or _gpus() >= args.nproc:
        configurations += [(f"{args.nproc} DDP ranks", {"nproc_per_node": args.nproc, "sharding": "none"}),
                           (f"{args.nproc} sharded ranks", {"nproc_per_node": args.nproc, "sharding": "fsdp"})]
    for name, settings in configurations:
        run = sentiment_run(tmp / name.replace(" ", "-"), str(base), hp, n_train=4 * batch, n_eval=4)
        run.done = dict(first.done)
        row = {"configuration": name, **stage(run, settings, args.device)}
        print(json.dumps(row), flush=True)
        rows.append(row)
    print("RESULT " + json.dumps({"base": str(base), "device": args.device, "steps": args.steps, "seq": args.seq,
                                  "rows": rows}))


def _gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


if __name__ == "__main__":
    main()
