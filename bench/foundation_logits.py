"""The foundation SFT step with full logits against logits only at the supervised positions, side by side.

Two arms train their own copy of the same model on the same batches, one step each in turn (so a change in
the machine's load reaches both alike): `full` computes the head on every position and lets the loss read
the supervised ones through ignore_index (the SFT step before issue 52 item 5), `supervised` is today's
runtime/sft.py `supervised_loss` (the head on the supervised positions alone). A step is the forward, the
backward and the AdamW update of runtime/sft.py; the figure is each arm's median step after the first two, per
repeat (the arm that goes first alternates step by step). Equality of the two is
plugins/foundation/tests/test_logits_only.py, not this bench.

Sizes (`--sizes`, any of):
- `example`: examples/foundation's model (depth 2, vocab 512, sequence 128, batch 8) on the example's own
  rows (every `examples` entry, led by its `system_prompt`), tokenized by a tokenizer trained here on the
  example's corpus at vocab 512 (the token_cache stage's tokenizer, without the stage);
- `larger`: depth 4, vocab 8192, sequence 256, batch 8, on chat-shaped rows of seeded random ids (the
  example's corpus is too small for an 8k tokenizer and a step's time does not depend on which ids it
  sees): a prompt of sequence/16 to 3·sequence/4 tokens (unsupervised), an answer of sequence/32 to
  sequence/4 (supervised), padded to the longest row of the batch, like sft.collate;
- `deeper`: the same rows at depth 8 (width 512), vocab 16384, sequence 256.

    plugins/foundation/.venv/bin/python -P bench/foundation_logits.py [--sizes example larger] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "plugins" / "foundation"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from tt_engine_foundation.runtime import sft, tokenizer  # noqa: E402
from tt_engine_foundation.runtime.model import GPT, config_for_depth  # noqa: E402
from tt_engine_foundation.runtime.optim import build_adamw  # noqa: E402

EXAMPLE = ROOT / "examples" / "foundation"
SIZES = {  # `steps` a repeat: the example's steps are short, so more of them make a steadier median
    "example": dict(depth=2, vocab=512, seq=128, batch=8, steps=40),
    "larger": dict(depth=4, vocab=8192, seq=256, batch=8, steps=8),
    "deeper": dict(depth=8, vocab=16384, seq=256, batch=8, steps=8),
}


def example_rows(seq: int, vocab: int) -> list:
    spec = json.loads((EXAMPLE / "tunedtensor.json").read_text(encoding="utf-8"))
    with open(EXAMPLE / spec["foundation"]["corpus_path"], encoding="utf-8") as handle:
        tok = tokenizer.train((json.loads(line)["text"] for line in handle), vocab)
    rows = [{"id": str(i), "messages": [{"role": "system", "content": spec["system_prompt"]},
                                        {"role": "user", "content": e["input"]},
                                        {"role": "assistant", "content": e["output"]}]}
            for i, e in enumerate(spec["examples"])]
    return sft.build_examples(tok, rows, seq)[0]


def chat_shaped_rows(seq: int, vocab: int, count: int = 64) -> list:
    gen = np.random.default_rng(0)
    rows = []
    for _ in range(count):
        prompt, answer = int(gen.integers(seq // 16, 3 * seq // 4 + 1)), int(gen.integers(seq // 32, seq // 4 + 1))
        answer = min(answer, seq + 1 - prompt)
        ids = gen.integers(8, vocab, prompt + answer).tolist()
        rows.append((ids, [0] * prompt + [1] * answer))
    return rows


def full_loss(model, x, y, autocast_dtype) -> torch.Tensor:
    """runtime/sft.py supervised_loss before: the head on every position, ignore_index drops the rest."""
    logits = model(x)
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), y.reshape(-1), ignore_index=sft.IGNORE)


class Arm:
    def __init__(self, name: str, loss, size: dict) -> None:
        self.name, self.loss_fn = name, loss
        torch.manual_seed(0)
        self.model = GPT(config_for_depth(size["depth"], size["vocab"], size["seq"]))
        self.model.init_weights(0)
        self.model.train()
        self.optimizer = build_adamw(self.model, 5e-4, 0.1, torch.device("cpu"))
        self.times: list[float] = []
        self.loss = float("nan")

    def step(self, x, y) -> None:
        started = time.perf_counter()
        loss = self.loss_fn(self.model, x, y, None)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.times.append(time.perf_counter() - started)
        self.loss = float(loss.detach())


def run(name: str, size: dict, repeats: int) -> None:
    steps = size["steps"]
    rows = example_rows(size["seq"], size["vocab"]) if name == "example" else chat_shaped_rows(size["seq"], size["vocab"])
    batches = [sft.collate([rows[(s * size["batch"] + i) % len(rows)] for i in range(size["batch"])], 1)
               for s in range(steps)]
    tokens = sum(int(x.numel()) for x, _ in batches)
    labelled = sum(int((y != sft.IGNORE).sum()) for _, y in batches)
    width = statistics.mean(x.shape[1] for x, _ in batches)
    print(f"\n{name}: depth {size['depth']}, vocab {size['vocab']}, batch {size['batch']}, mean width {width:.0f}, "
          f"{labelled / tokens:.0%} of positions labelled ({labelled}/{tokens}), {steps} steps a repeat")
    print("| repeat | full (s/step) | supervised only (s/step) | speed-up | final loss full / supervised |")
    print("|---|---|---|---|---|")
    for repeat in range(repeats):
        arms = [Arm("full", full_loss, size), Arm("supervised", sft.supervised_loss, size)]
        for s, (x, y) in enumerate(batches):
            for arm in (arms if s % 2 == 0 else arms[::-1]):
                arm.step(x, y)
        full, ours = (statistics.median(a.times[2:]) for a in arms)
        print(f"| {repeat + 1} | {full:.4f} | {ours:.4f} | {full / ours:.2f}x | {arms[0].loss:.5f} / {arms[1].loss:.5f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", choices=sorted(SIZES), default=["example", "larger"])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_flush_denormal(True)
    print(f"threads {torch.get_num_threads()}, torch {torch.__version__}, "
          f"load at start {tuple(round(v, 2) for v in os.getloadavg())}")
    for name in args.sizes:
        run(name, SIZES[name], args.repeats)
    print(f"\nload at end {tuple(round(v, 2) for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
