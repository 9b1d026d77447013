"""Foundation pretraining throughput and model FLOPs utilization (MFU).

Runs the engine's real pretraining loop (`run_pretraining`: AdamW, schedule,
clipping, heartbeats, the final checkpoint) on a synthetic token cache, and
compares achieved FLOP/s (nanochat's 6N + 12·L·H·D·T per token) with the
fp32 (CPU) or bf16 (CUDA) matmul peak measured in the same process.

    <foundation env>/bin/python bench/foundation_pretrain.py            # CPU: depths 2, 4, 8
    <foundation env>/bin/python bench/foundation_pretrain.py --cuda     # CUDA: depths 12 and 20, bf16

Prints one JSON line per configuration.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins" / "foundation"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from tt_engine_foundation.runtime import checkpoints as ckpt  # noqa: E402
from tt_engine_foundation.runtime.model import GPT, config_for_depth, derived_learning_rate  # noqa: E402
from tt_engine_foundation.runtime.pretrain import run_pretraining  # noqa: E402
from tt_stagekit import protocol  # noqa: E402


def matmul_peak(device: torch.device, dtype: torch.dtype, n: int, repeats: int) -> float:
    """Best FLOP/s of an n×n×n matmul."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(2):
        a @ b
    if device.type == "cuda":
        torch.cuda.synchronize()
    best = 0.0
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(5 if device.type == "cuda" else 1):
            a @ b
        if device.type == "cuda":
            torch.cuda.synchronize()
        elapsed = (time.perf_counter() - start) / (5 if device.type == "cuda" else 1)
        best = max(best, 2 * n**3 / elapsed)
    return best


def bench(depth: int, seq: int, vocab: int, batch: int, steps: int, device: torch.device, bf16: bool,
          compile_model: bool) -> dict:
    cfg = dict(depth=depth, vocab_size=vocab, sequence_length=seq, batch_size=batch, gradient_accumulation_steps=1,
               weight_decay=0.1, warmup_steps=1, min_lr_ratio=0.1, pretrain_steps=steps, gradient_clip=1.0,
               seed=0, bf16=bf16, log_interval_steps=steps, checkpoint_interval_steps=0,
               checkpoint_interval_seconds=0, keep_checkpoints=1, compile=compile_model)
    model_cfg = config_for_depth(depth, vocab, seq)
    tokens = np.random.default_rng(0).integers(0, vocab, size=seq * batch * (steps + 2) + 1, dtype=np.int64)
    tokens = tokens.astype(np.uint16 if vocab <= 65536 else np.uint32)
    lr = derived_learning_rate(depth)
    config = {"bench": True, **cfg}
    with tempfile.TemporaryDirectory() as tmp:
        _, state, figures = run_pretraining(
            cfg=cfg, model_cfg=model_cfg, tokens=tokens, device=device, peak_lr=lr, config=config,
            fingerprint=ckpt.config_fingerprint(config), checkpoint_dir=Path(tmp) / "ckpt", backup_dir=None,
            heartbeat_path=Path(tmp) / "beats.jsonl",
        )
    flops_per_token = GPT(model_cfg).flops_per_token(seq)
    tps = figures["tokens_per_second"]
    return {"depth": depth, "width": model_cfg.hidden_size, "seq": seq, "vocab": vocab,
            "tokens_per_step": seq * batch, "timed_steps": steps - 1, "tokens_per_second": round(tps, 1),
            "model_tflops": round(tps * flops_per_token / 1e12, 4), "flops_per_token": flops_per_token,
            "final_loss": round(state.last_loss, 4)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cuda", action="store_true")
    parser.add_argument("--steps", type=int, default=0)
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args()
    protocol.emit = lambda event: None  # silence progress events
    protocol.log = lambda message, level="info": None
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    if args.cuda:
        device = torch.device("cuda")
        torch.backends.cuda.matmul.allow_tf32 = True
        peak = matmul_peak(device, torch.bfloat16, 8192, 10)
        runs = [dict(depth=12, seq=2048, vocab=65536, batch=16), dict(depth=20, seq=2048, vocab=65536, batch=16)]
        steps, bf16, comp = args.steps or 30, True, True
        peak_name = "bf16_matmul_peak_tflops"
    else:
        device = torch.device("cpu")
        peak = matmul_peak(device, torch.float32, 2048, 5)
        runs = [dict(depth=d, seq=512, vocab=32768, batch=8) for d in (2, 4, 8)]
        steps, bf16, comp = args.steps or 6, False, False
        peak_name = "fp32_matmul_peak_tflops"
    print(json.dumps({"device": str(device), "threads": torch.get_num_threads(), peak_name: round(peak / 1e12, 4),
                      "torch": torch.__version__,
                      "gpu": torch.cuda.get_device_name() if args.cuda else None}), flush=True)
    for run in runs:
        out = bench(steps=steps, device=device, bf16=bf16, compile_model=comp, **run)
        out["mfu"] = round(out["model_tflops"] * 1e12 / peak, 4)
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
