"""Bench: peak training memory of a LoRA step with and without gradient checkpointing (adapter engine).

    <adapter env>/bin/python bench/gradient_checkpointing_memory.py [--device cpu|cuda] [--hidden 512]
        [--layers 8] [--batch 4] [--seq 512]

Builds a Llama-style model locally (no hub), wraps it in LoRA exactly as the
train stage does (runtime.memory.prepare_base + runtime.train.wrap_lora) and
runs one forward/backward per setting, each in a fresh process (peak RSS is a
high-water mark). Reports, per setting, the bytes autograd keeps for the
backward pass (saved_tensors_hooks: exact, the same on every machine), the
process's peak RSS (CPU) or torch.cuda.max_memory_allocated (CUDA), the
loss (equal in both) and the time of the step, and the ratios in the same run.
Prints one JSON object.
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

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def one(args: argparse.Namespace, model_dir: str, checkpointing: bool) -> dict:
    import resource

    import torch

    from tt_engine_adapter.runtime import memory, model_source
    from tt_engine_adapter.runtime import train as loop
    from tt_engine_adapter.runtime.config import AdapterSettings

    torch.manual_seed(0)
    hp = AdapterSettings(lora_rank=16, lora_dropout=0.0, gradient_checkpointing=checkpointing)
    model = loop.wrap_lora(memory.prepare_base(model_source.load_model(model_dir, args.device, torch.float32), hp), hp)
    model.train()
    ids = torch.randint(10, model.config.vocab_size, (args.batch, args.seq),
                        generator=torch.Generator().manual_seed(1)).to(args.device)
    saved = [0]

    def pack(t):
        saved[0] += t.numel() * t.element_size()
        return t

    if args.device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    started = time.perf_counter()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=ids).loss
    loss.backward()
    if args.device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    out = {"gradient_checkpointing": checkpointing, "loss": round(loss.item(), 6), "saved_for_backward_bytes": saved[0],
           "step_seconds": round(seconds, 3)}
    if args.device == "cuda":
        out["cuda_peak_allocated_bytes"] = torch.cuda.max_memory_allocated()
    else:
        out["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        out["peak_rss_growth_bytes"] = out["peak_rss_bytes"] - rss_before
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--_one", choices=["on", "off"], help=argparse.SUPPRESS)
    parser.add_argument("--_model", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._one:
        print(json.dumps(one(args, args._model, args._one == "on")))
        return 0

    from tt_engine_adapter.testing.tiny_model import build

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = str(build(Path(tmp) / "model", arch="llama", hidden=args.hidden, layers=args.layers,
                              vocab_size=2048))
        results = {}
        for setting in ("off", "on"):
            cmd = [sys.executable, __file__, "--_one", setting, "--_model", model_dir, "--device", args.device,
                   "--hidden", str(args.hidden), "--layers", str(args.layers), "--batch", str(args.batch),
                   "--seq", str(args.seq)]
            proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
            results[setting] = json.loads(proc.stdout.strip().splitlines()[-1])
    off, on = results["off"], results["on"]
    peak = "cuda_peak_allocated_bytes" if args.device == "cuda" else "peak_rss_growth_bytes"
    report = {
        "device": args.device, "model": {"hidden": args.hidden, "layers": args.layers, "vocab": 2048},
        "batch": args.batch, "seq": args.seq, "without": off, "with": on,
        "same_loss": abs(off["loss"] - on["loss"]) < 1e-5,
        "saved_for_backward_ratio": round(on["saved_for_backward_bytes"] / off["saved_for_backward_bytes"], 3),
        "peak_ratio": round(on[peak] / max(off[peak], 1), 3),
        "time_ratio": round(on["step_seconds"] / max(off["step_seconds"], 1e-9), 3),
        "load_average": os.getloadavg(),
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
