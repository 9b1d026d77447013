"""What a stage's imports cost with bitsandbytes left out (the adapter's `runtime/bitsandbytes_gate.py`) and with
it imported, as PEFT and transformers do wherever it is installed.

Each sample is a fresh `python -P` of the adapter engine's environment that imports what a LoRA stage imports
(the stages package, torch, transformers, PEFT) and builds a LoRA model on a one-layer Llama: "gated" imports
the stages package first (the gate marks bitsandbytes absent on a machine without a GPU); "as PEFT does" imports
PEFT first, so bitsandbytes loads before the gate could act. The two alternate (A B A B ...); each reports its
wall time and whether bitsandbytes was imported. On a machine with a GPU the gate lets bitsandbytes load and
both sides are the same.

Run: plugins/adapter/.venv/bin/python -P bench/stage_imports.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = """
import json, sys, time
start = time.perf_counter()
{first}
import torch, transformers, peft
import tt_engine_adapter.stages
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM
model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                     num_attention_heads=2, num_key_value_heads=2))
get_peft_model(model, LoraConfig(r=2, target_modules="all-linear", task_type="CAUSAL_LM"))
seconds, loaded = time.perf_counter() - start, sys.modules.get("bitsandbytes") is not None
print(json.dumps({{"seconds": seconds, "bitsandbytes": loaded}}))
"""

SIDES = {"gated": "import tt_engine_adapter.stages", "as PEFT does": "import peft"}


def sample(first: str) -> dict:
    env = {**os.environ, "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}
    done = subprocess.run([sys.executable, "-P", "-c", CHILD.format(first=first)], capture_output=True, text=True,
                          timeout=600, env=env)
    if done.returncode != 0:
        raise SystemExit(f"the import child failed:\n{done.stderr[-3000:]}")
    line = done.stdout.strip().splitlines()[-1]
    return json.loads(line)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    results: dict[str, list[dict]] = {side: [] for side in SIDES}
    sample(SIDES["gated"])  # warm the page cache once, not counted
    for _ in range(args.repeats):
        for side, first in SIDES.items():
            results[side].append(sample(first))
    report = {"load_average": os.getloadavg(), "repeats": args.repeats}
    for side, rows in results.items():
        seconds = [row["seconds"] for row in rows]
        report[side] = {"median_s": round(statistics.median(seconds), 3), "min_s": round(min(seconds), 3),
                        "max_s": round(max(seconds), 3),
                        "bitsandbytes_imported": sorted({row["bitsandbytes"] for row in rows})}
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
