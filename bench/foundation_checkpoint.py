"""Checkpoint save time against a plain safetensors + torch.save of the same state.

The engine's `Saver.save` serialises weights (safetensors), optimizer and
trainer state (torch.save) and returns; hashing, fsync, metadata, the atomic
rename and rolling finish in a background thread while training goes on.
`engine_s` is what the training loop waits for (target: at most 1.5x the
baseline); `durable_s` is until the checkpoint is complete on disk. The
baseline is `safetensors.torch.save_file` of the weights plus `torch.save` of
the optimizer state into a folder, nothing else.

    <foundation env>/bin/python bench/foundation_checkpoint.py [--depth 8] [--vocab 32768]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins" / "foundation"))

import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

from tt_engine_foundation.runtime import checkpoint as ckpt  # noqa: E402
from tt_engine_foundation.runtime.model import GPT, config_for_depth  # noqa: E402
from tt_engine_foundation.runtime.optim import build_adamw  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--depth", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=32768)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    model = GPT(config_for_depth(args.depth, args.vocab, 512))
    model.init_weights(0)
    opt = build_adamw(model, 1e-3, 0.1, torch.device("cpu"))
    x = torch.randint(0, args.vocab, (2, 65))
    torch.nn.functional.cross_entropy(model(x[:, :-1]).reshape(-1, args.vocab), x[:, 1:].reshape(-1)).backward()
    opt.step()
    state = ckpt.TrainerState(step=1, samples_consumed=2, tokens_seen=128, last_loss=1.0)
    with tempfile.TemporaryDirectory(dir=".") as tmp:
        root = Path(tmp)
        plain, ours, durable = [], [], []
        saver = ckpt.Saver(root / "ckpts", keep=2)
        for i in range(args.repeats):
            target = root / f"plain-{i}"
            os.sync()  # both measurements start with no dirty pages
            start = time.perf_counter()
            target.mkdir()
            save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(target / "model.safetensors"))
            torch.save(opt.state_dict(), target / "optimizer.pt")
            plain.append(time.perf_counter() - start)
            os.sync()
            start = time.perf_counter()
            state.step = i + 1
            path = saver.save(model, opt, state, {"bench": True}, "f" * 64)
            ours.append(time.perf_counter() - start)  # what the training loop waits for
            saver.wait()
            durable.append(time.perf_counter() - start)  # hashed, fsynced, renamed, rolled
            size = sum(p.stat().st_size for p in path.iterdir())
            shutil.rmtree(target)
        start = time.perf_counter()
        ok, reason, _ = ckpt.verify(path)
        verify_s = time.perf_counter() - start
    result = {"depth": args.depth, "vocab": args.vocab, "parameters": model.num_params(),
              "checkpoint_mb": round(size / 1e6, 1), "plain_s": round(min(plain), 3), "engine_s": round(min(ours), 3),
              "ratio": round(min(ours) / min(plain), 3),
              "durable_s": round(min(durable), 3), "durable_ratio": round(min(durable) / min(plain), 3), "verify_s": round(verify_s, 3), "intact": ok}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
