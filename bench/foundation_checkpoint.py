"""Checkpoint save time against a plain safetensors + torch.save of the same state.

The engine's `Saver.save` copies weights and AdamW state into reused CPU staging
buffers and returns; serialisation, hashing, fsync, metadata, the atomic rename
and rolling finish in a background thread while training goes on.

- `engine_s`: what the training loop waits for on a repeated save (target: at
  most 1.5x the baseline); `first_engine_s`: the first save, which also
  allocates the staging buffers.
- `durable_s`: until the checkpoint is complete on disk.
- `plain_s`: `safetensors.torch.save_file` of the weights plus `torch.save` of
  the optimizer state into a folder, nothing else (no fsync).
- `overlap`: time of a few training steps while a save finishes in the
  background, against the same steps with no save running (the background
  thread's cost to training).
- `--in-loop N`: the engine's real pretraining loop (`run_pretraining`, seq 512,
  8 sequences per step) run for N steps three times: checkpoint only at the
  end; a checkpoint after every step; a checkpoint after every step written by
  a plain synchronous saver (the baseline above, with the same rolling). The
  extra time per checkpoint is what it costs training, all included (page
  cache and writeback work too); `loop_cost_ratio` is ours over plain.

    <foundation env>/bin/python bench/foundation_checkpoint.py [--depth 8] [--vocab 32768] [--in-loop 6]
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

from tt_engine_foundation.runtime import checkpoints as ckpt  # noqa: E402
from tt_engine_foundation.runtime.loss import cross_entropy  # noqa: E402
from tt_engine_foundation.runtime.model import GPT, config_for_depth  # noqa: E402
from tt_engine_foundation.runtime.optim import build_adamw  # noqa: E402
from tt_engine_foundation.runtime.pretrain import run_pretraining  # noqa: E402
from tt_stagekit import protocol  # noqa: E402


def train_steps(model, opt, vocab: int, count: int) -> float:
    x = torch.randint(0, vocab, (2, 129), generator=torch.Generator().manual_seed(0))
    start = time.perf_counter()
    for _ in range(count):
        cross_entropy(model(x[:, :-1]).reshape(-1, vocab), x[:, 1:].reshape(-1)).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return time.perf_counter() - start


class PlainSaver:
    """The baseline inside the loop: save_file + torch.save into step-N/, synchronously; rolled to `keep`."""

    def __init__(self, directory: Path, keep: int, backup_dir=None):
        self.directory, self.keep = directory, keep

    def save(self, model, optimizer, state, config, fingerprint, rank_rng=None) -> Path:
        target = self.directory / ckpt.step_name(state.step)
        target.mkdir(parents=True)
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(target / "model.safetensors"))
        torch.save(optimizer.state_dict(), target / "optimizer.pt")
        ckpt.roll(self.directory, self.keep)
        return target

    def wait(self) -> None:
        pass


def loop_seconds(depth: int, vocab: int, steps: int, every: int, plain: bool = False) -> float:
    """Wall time of the real pretraining loop with a checkpoint every `every` steps (0: only the last),
    written by the engine's Saver or, with `plain`, by PlainSaver."""
    import numpy as np

    seq, batch = 512, 8
    cfg = dict(depth=depth, vocab_size=vocab, sequence_length=seq, batch_size=batch, gradient_accumulation_steps=1,
               weight_decay=0.1, warmup_steps=1, min_lr_ratio=0.1, pretrain_steps=steps, gradient_clip=1.0, seed=0,
               bf16=False, log_interval_steps=steps, checkpoint_interval_steps=every, checkpoint_interval_seconds=0,
               keep_checkpoints=2, compile=False)
    tokens = np.random.default_rng(0).integers(0, vocab, size=seq * batch * (steps + 2) + 1).astype(np.uint16)
    config = {"bench": True, **cfg}
    engine_saver = ckpt.Saver
    with tempfile.TemporaryDirectory(dir=".") as tmp:
        ckpt.Saver = PlainSaver if plain else engine_saver
        os.sync()
        start = time.perf_counter()
        run_pretraining(cfg=cfg, model_cfg=config_for_depth(depth, vocab, seq), tokens=tokens,
                        device=torch.device("cpu"), peak_lr=1e-3, config=config,
                        fingerprint=ckpt.config_fingerprint(config), checkpoint_dir=Path(tmp) / "ckpt",
                        backup_dir=None, heartbeat_path=Path(tmp) / "beats.jsonl")
        elapsed = time.perf_counter() - start
        ckpt.Saver = engine_saver
        return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--depth", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=32768)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--overlap-steps", type=int, default=3)
    parser.add_argument("--in-loop", type=int, default=0, metavar="STEPS")
    args = parser.parse_args()
    protocol.emit = lambda event: None  # silence the loop's progress events
    torch.set_flush_denormal(True)
    model = GPT(config_for_depth(args.depth, args.vocab, 512))
    model.init_weights(0)
    opt = build_adamw(model, 1e-3, 0.1, torch.device("cpu"))
    train_steps(model, opt, args.vocab, 1)
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
            durable.append(time.perf_counter() - start)  # serialised, hashed, fsynced, renamed, rolled
            size = sum(p.stat().st_size for p in path.iterdir())
            shutil.rmtree(target)
        start = time.perf_counter()
        ok, reason, _ = ckpt.verify(path)
        verify_s = time.perf_counter() - start
        os.sync()
        alone = train_steps(model, opt, args.vocab, args.overlap_steps)
        os.sync()
        state.step += 1
        saver.save(model, opt, state, {"bench": True}, "f" * 64)
        overlapped = train_steps(model, opt, args.vocab, args.overlap_steps)
        saver.wait()
    later = ours[1:] or ours
    result = {"depth": args.depth, "vocab": args.vocab, "parameters": model.num_params(),
              "checkpoint_mb": round(size / 1e6, 1), "plain_s": round(min(plain), 3),
              "first_engine_s": round(ours[0], 3), "engine_s": round(min(later), 3),
              "ratio": round(min(later) / min(plain), 3), "first_ratio": round(ours[0] / min(plain), 3),
              "durable_s": round(min(durable), 3), "durable_ratio": round(min(durable) / min(plain), 3),
              "verify_s": round(verify_s, 3), "intact": ok,
              "steps_alone_s": round(alone, 3), "steps_during_save_s": round(overlapped, 3),
              "overlap": round(overlapped / alone, 3)}
    if args.in_loop:
        final_only = loop_seconds(args.depth, args.vocab, args.in_loop, 0)
        every_step = loop_seconds(args.depth, args.vocab, args.in_loop, 1)
        plain_every_step = loop_seconds(args.depth, args.vocab, args.in_loop, 1, plain=True)
        ours_cost = (every_step - final_only) / (args.in_loop - 1)
        plain_cost = (plain_every_step - final_only) / (args.in_loop - 1)
        result.update(loop_steps=args.in_loop, loop_final_checkpoint_only_s=round(final_only, 3),
                      loop_checkpoint_every_step_s=round(every_step, 3),
                      loop_plain_every_step_s=round(plain_every_step, 3),
                      loop_cost_per_checkpoint_s=round(ours_cost, 3), loop_plain_cost_per_checkpoint_s=round(plain_cost, 3),
                      loop_cost_ratio=round(ours_cost / plain_cost, 3) if plain_cost > 0 else None)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
