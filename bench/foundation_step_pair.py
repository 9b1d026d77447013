"""Pretraining step time of several tt configurations, paired: they take turns step by step in one process.

On a noisy machine two runs minutes apart differ by more than most changes to a step (docs/performance.md
saw 1,296 and 1,611 tokens/s for the same model). Here every configuration trains its own model on the
same rows, one step each in turn, so a change in load reaches all of them alike, and the figure is each
one's median step after the first two.

A configuration is `SOURCE:PRECISION`: SOURCE a checkout of this repository (its
plugins/foundation code is imported, so two commits compare side by side: `git worktree add /tmp/old
<commit>`), PRECISION `fp32` or `bf16` (`foundation.cpu_bf16`: autocast and Muon's iteration in bf16, the
way the pretrain stage runs it). Rows come from a token cache made by the token_cache stage (--cache DIR
holding pretrain-tokens.bin and its packing table), else uniform random ids.

    plugins/foundation/.venv/bin/python -P bench/foundation_step_pair.py .:fp32 .:bf16 \\
        [--cache RUN/pretrain/recovery] [--depth 4 --vocab 8192 --seq 512 --batch 8 --steps 12]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

MODULES = ("model", "loss", "optim", "hyperparams", "packing")


def import_runtime(source: Path) -> dict:
    """The foundation runtime modules of the checkout at `source`, imported afresh."""
    for name in [n for n in sys.modules if n.startswith("tt_engine_foundation")]:
        del sys.modules[name]
    sys.path.insert(0, str(source / "plugins" / "foundation"))
    try:
        return {n: importlib.import_module(f"tt_engine_foundation.runtime.{n}") for n in MODULES}
    finally:
        sys.path.pop(0)


class Trainer:
    def __init__(self, label: str, args, rows) -> None:
        source, _, precision = label.rpartition(":")
        if precision not in ("fp32", "bf16"):
            raise SystemExit(f"{label}: expected SOURCE:fp32 or SOURCE:bf16")
        self.label, self.rt, self.rows, self.args = label, import_runtime(Path(source or ".").resolve()), rows, args
        self.bf16 = precision == "bf16"
        rt = self.rt
        torch.manual_seed(0)
        self.model = rt["model"].GPT(rt["model"].config_for_depth(args.depth, args.vocab, args.seq))
        self.model.init_weights(0)
        self.model.train()
        width = self.model.cfg.hidden_size
        rates = rt["hyperparams"].muon_rates(width, args.depth, args.vocab, args.batch * args.seq)
        try:
            self.optimizer = rt["optim"].build_muon_adamw(self.model, rates, torch.device("cpu"), ns_bf16=self.bf16)
        except TypeError:  # a checkout from before the bf16 iteration
            self.optimizer = rt["optim"].build_muon_adamw(self.model, rates, torch.device("cpu"))
        self.times: list[float] = []
        self.loss = float("nan")

    def step(self, index: int) -> None:
        rt = self.rt
        batch = torch.from_numpy(self.rows(index))
        inputs, targets = rt["packing"].inputs_and_targets(batch, 1)
        started = time.perf_counter()
        precision = torch.autocast("cpu", dtype=torch.bfloat16) if self.bf16 else contextlib.nullcontext()
        with precision:
            logits = self.model(inputs)
        loss = rt["loss"].cross_entropy(logits.reshape(-1, logits.size(-1)).float(), targets.reshape(-1),
                                        rt["packing"].PAD_TARGET)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.loss = float(loss.detach())
        self.times.append(time.perf_counter() - started)


def row_source(args):
    if args.cache is None:
        gen = np.random.default_rng(0)
        return lambda i: gen.integers(2, args.vocab, (args.batch, args.seq + 1), dtype=np.int64)
    from tt_engine_foundation.runtime import packing  # this checkout's: only to read the cache
    tokens = np.fromfile(args.cache / "pretrain-tokens.bin", dtype="<u2")
    table = packing.read_table(args.cache / "pretrain-tokens.packing.bin")
    rows = packing.PackedRows(tokens, table, args.seq + 1, 0, 1, seed=0)
    return lambda i: rows.batch(i * args.batch, args.batch)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("configs", nargs="+", help="SOURCE:fp32 or SOURCE:bf16")
    parser.add_argument("--cache", type=Path, help="a token_cache stage's folder (pretrain-tokens.bin)")
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=12)
    args = parser.parse_args()
    torch.set_flush_denormal(True)
    rows = row_source(args)
    trainers = [Trainer(label, args, rows) for label in args.configs]
    for index in range(args.steps):
        for trainer in trainers:
            trainer.step(index)
    tokens = args.batch * args.seq
    first = statistics.median(trainers[0].times[2:])
    print(f"threads {torch.get_num_threads()}, load {tuple(round(x, 2) for x in os.getloadavg())}")
    for trainer in trainers:
        print(f"{trainer.label}: {Path(trainer.rt['model'].__file__).parents[2]}")
    print("| configuration | median step (s) | tokens/s | vs first | loss at the last step |")
    print("|---|---|---|---|---|")
    for trainer in trainers:
        median = statistics.median(trainer.times[2:])
        print(f"| {trainer.label} | {median:.3f} | {tokens / median:,.0f} | {first / median:.2f}x | {trainer.loss:.4f} |")


if __name__ == "__main__":
    main()
