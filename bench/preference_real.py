"""Bench: base → SFT → SFT+DPO on a REAL pretrained base (SmolLM2-135M-Instruct, scripts/real-base), held-out
score of each, through the adapter's real stage entry points (tt_engine_adapter.testing.harness).

    OMP_WAIT_POLICY=PASSIVE plugins/adapter/.venv/bin/python bench/preference_real.py [--seeds 7] [--loss dpo]

The task (this bench's own, checkable): "Which number is larger? A or B" with two 2- or 3-digit numbers, the
answer the larger number (digits only). 64 training prompts, 32 held out, generated from the seed. Stages:
prepare, prefetch, baseline (the base), train (LoRA SFT, deliberately short: 1 epoch), sft (held-out score of
the SFT adapter), reference (derived pairs: the SFT adapter sampled 6 times per TRAINING prompt at temperature
1.0, graded by exact match against the row's answer; held-out prompts never sampled), preference (DPO, beta
0.1, from the SFT adapter, reference = the SFT adapter) and candidate (held-out score of the final adapter).
Prints one JSON object per seed (`RESULT {...}`): held-out exact match base / SFT / final, the pair counts,
each stage's wall seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
REPO = Path(__file__).resolve().parents[1]
SYSTEM = "Answer with the larger of the two numbers, digits only."
HP = {"n_epochs": 1, "learning_rate": 1e-3, "batch_size": 8, "lora_rank": 8, "lora_alpha": 16.0,
      "lora_dropout": 0.0, "max_seq_length": 96, "max_new_tokens": 6, "eval_batch_size": 16, "warmup_ratio": 0.0,
      "lr_scheduler": "constant", "checkpoint_interval_steps": 1000, "precision": "fp32"}
PREFERENCE = {"loss": "dpo", "beta": 0.1, "simpo_gamma": 0.5, "pairs": "derived", "reference": "sft",
              "samples_per_prompt": 6, "temperature": 1.0, "max_new_tokens": None, "sft_weight": 0.0,
              "learning_rate": 1e-4, "n_epochs": 2, "max_steps": None, "batch_size": 4}


def examples(seed: int, count: int) -> list[dict]:
    rng = random.Random(seed)
    seen, out = set(), []
    while len(out) < count:
        a, b = rng.randint(10, 999), rng.randint(10, 999)
        if a == b or (a, b) in seen:
            continue
        seen.add((a, b))
        out.append({"input": f"Which number is larger? {a} or {b}", "output": str(max(a, b))})
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+", default=[7])
    parser.add_argument("--loss", default="dpo", choices=["dpo", "simpo", "kto"])
    parser.add_argument("--n-train", type=int, default=64)
    parser.add_argument("--n-eval", type=int, default=32)
    args = parser.parse_args()
    base = subprocess.run([str(REPO / "scripts" / "real-base")], capture_output=True, text=True, check=True,
                          env={**os.environ, "TT_REAL_BASE_PYTHON": sys.executable}).stdout.strip().splitlines()[-1]
    from tt_engine_adapter.testing.harness import Run

    for seed in args.seeds:
        rows = examples(seed, args.n_train + args.n_eval)
        spec = {"name": "larger", "engine": "adapter", "base_model": base, "base_model_revision": None,
                "system_prompt": SYSTEM, "guidelines": [], "constraints": [], "datasets": None,
                "hyperparameters": {**HP, "seed": seed}, "preference": {**PREFERENCE, "loss": args.loss}}
        run = Run(Path(tempfile.mkdtemp(prefix="tt-pref-bench-")), spec, rows[:args.n_train], rows[args.n_train:])
        seconds, started = {}, time.time()
        for stage in ("prepare", "prefetch", "baseline", "train", "sft", "reference", "preference", "candidate"):
            t = time.perf_counter()
            run.stage(stage)
            seconds[stage] = round(time.perf_counter() - t, 1)
            print(f"{stage} done in {seconds[stage]}s", file=sys.stderr, flush=True)
        ref = run.done["reference"]["result"]["metrics"]
        pref = run.done["preference"]["result"]["metrics"]
        result = {"seed": seed, "loss": args.loss, "base": run.exact_match("baseline"), "sft": run.exact_match("sft"),
                  "final": run.exact_match("candidate"), "held_out": args.n_eval, "train_prompts": args.n_train,
                  "pairs": ref["reference.pairs"], "all_pass": ref["reference.all_pass"],
                  "all_fail": ref["reference.all_fail"], "reference_forwards": ref["reference.forwards"],
                  "preference_steps": pref["preference.steps"], "reward_accuracy": pref.get("preference.reward_accuracy"),
                  "stage_seconds": seconds, "total_seconds": round(time.time() - started, 1), "run_dir": str(run.run_dir)}
        print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
