"""What `foundation.qk_norm` costs per training step: the model with and without it, timed interleaved.

One process builds both models (same depth, vocabulary, sequence length, seed) with the engine's Muon + AdamW
(runtime/optim.py, rates from runtime/hyperparams.py) and times full steps (forward, loss, backward, optimizer
step) on the same random batch, alternating the two models step by step so that both see the same machine
load. Prints one JSON line per configuration: median seconds per step and tokens/s of each, and the ratio.

    plugins/foundation/.venv/bin/python -P bench/foundation_qk_norm_cost.py --config 2,128,2048,8 --steps 40
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins" / "foundation"))
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as bench/foundation_vs_nanochat.py: no spinning threads on a shared machine

import torch  # noqa: E402

from tt_engine_foundation.runtime.hyperparams import muon_rates  # noqa: E402
from tt_engine_foundation.runtime.model import GPT, config_for_depth  # noqa: E402
from tt_engine_foundation.runtime.optim import build_muon_adamw  # noqa: E402


def trainer(depth: int, seq: int, vocab: int, batch: int, qk_norm: bool):
    model = GPT(config_for_depth(depth, vocab, seq, qk_norm))
    model.init_weights(0)
    width = model.cfg.hidden_size
    optimizer = build_muon_adamw(model, muon_rates(width, depth, vocab, batch * seq), torch.device("cpu"))
    return model.train(), optimizer


def step(model, optimizer, rows: torch.Tensor) -> float:
    start = time.perf_counter()
    logits = model(rows[:, :-1])
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), rows[:, 1:].reshape(-1))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return time.perf_counter() - start


def measure(depth: int, seq: int, vocab: int, batch: int, steps: int) -> dict:
    torch.manual_seed(0)
    rows = torch.randint(0, vocab, (batch, seq + 1))
    runs = {name: trainer(depth, seq, vocab, batch, name == "qk_norm") for name in ("llama", "qk_norm")}
    times: dict[str, list[float]] = {name: [] for name in runs}
    load = os.getloadavg()
    for i in range(steps + 3):  # the first three of each warm up
        for name, (model, optimizer) in (runs.items() if i % 2 == 0 else reversed(list(runs.items()))):
            elapsed = step(model, optimizer, rows)
            if i >= 3:
                times[name].append(elapsed)
    median = {name: statistics.median(values) for name, values in times.items()}
    return {"depth": depth, "seq": seq, "vocab": vocab, "batch": batch, "steps": steps,
            "seconds_per_step": median, "tokens_per_second": {n: batch * seq / s for n, s in median.items()},
            "qk_norm_time_ratio": median["qk_norm"] / median["llama"], "load_average": [load, os.getloadavg()],
            "threads": torch.get_num_threads()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", action="append", default=[], metavar="DEPTH,SEQ,VOCAB,BATCH",
                        help="repeatable; default 2,128,2048,8")
    parser.add_argument("--steps", type=int, default=40, help="timed steps of each model")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    for config in args.config or ["2,128,2048,8"]:
        depth, seq, vocab, batch = (int(x) for x in config.split(","))
        print(json.dumps(measure(depth, seq, vocab, batch, args.steps)), flush=True)


if __name__ == "__main__":
    main()
