"""Bench: held-out grader score base → SFT → SFT+GRPO on the real base (SmolLM2-135M-Instruct, scripts/real-base).

Run in the adapter's test environment (plugins/adapter/.venv):

    OMP_WAIT_POLICY=PASSIVE plugins/adapter/.venv/bin/python bench/grpo_real.py [--seed 42] [--steps 30]

The task has a checkable answer: two-digit additions ("What is 37 + 45?" → "82"), 160 training and 40
held-out prompts (seeded). The graders are the spec's derived ones (every output is a number: one `number`
grader, tt_stagekit.graders), the same for the rewards and the held-out score. The stages run through the
adapter's stage harness as the host runs them: prepare, prefetch, baseline (the base), train (LoRA SFT,
one epoch), candidate (SFT), reinforce (GRPO from the SFT adapter), and candidate again with the GRPO adapter.
Prints `RESULT {...}`: the held-out grader score (mean reward) and pass rate of each, the stage seconds, the
GRPO reward series and the load average.

`--update-paths N`: instead, the policy update alone, side by side in one process, N interleaved repeats: one
step's group (4 prompts × 8 answers of up to 8 tokens, the task's chat prompts, KL to the reference, 2
iterations so the old log-probs are computed) through `reinforcement.backward` as it runs now (each group's
prompt once, logits only on the answer tokens), without the shared prompt, and with neither (the path
before issue 52: the head on every kept position); prints `PATHS {...}` with each path's best seconds and the
ratios, and the load average.
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
REPO = Path(__file__).resolve().parents[1]
SYSTEM = "Add the two numbers. Answer with the sum only, as digits."
SFT = {"n_epochs": 1, "learning_rate": 1e-3, "batch_size": 8, "lora_rank": 8, "lora_dropout": 0.0,
       "max_seq_length": 128, "max_new_tokens": 8, "eval_batch_size": 20, "warmup_ratio": 0.0,
       "lr_scheduler": "constant", "checkpoint_interval_steps": 1000}
GRPO = {"prompts_per_step": 4, "group_size": 8, "max_new_tokens": 8, "temperature": 1.0, "learning_rate": 2e-4,
        "kl_beta": 0.04, "rollout_batch_size": 32}


def examples(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    out, seen = [], set()
    while len(out) < n:
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        if (a, b) in seen:
            continue
        seen.add((a, b))
        out.append({"input": f"What is {a} + {b}?", "output": str(a + b)})
    return out


def score(run, stage: str, graders) -> dict:
    predictions = run.predictions(stage)
    rewards = [graders.reward(predictions[k], ref) for k, ref in run.references.items()]
    passes = [graders.passes(predictions[k], ref) for k, ref in run.references.items()]
    return {"grader_score": round(sum(rewards) / len(rewards), 4), "pass_rate": round(sum(passes) / len(passes), 4)}


def update_paths(model_dir: str, repeats: int) -> dict:
    import contextlib

    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tt_engine_adapter.runtime import chat, logits
    from tt_engine_adapter.runtime.reinforcement import train as reinforcement
    from tt_engine_adapter.runtime.config import ReinforcementSettings
    from tt_engine_adapter.runtime.prefix import Sharing
    from tt_engine_adapter.runtime.reinforcement.prompts import Prompt

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32),
                           LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", task_type="CAUSAL_LM"))
    model.eval()
    rng = random.Random(0)
    data = examples(4, 99)
    prompts = [Prompt(str(i), e["input"], e["output"], tuple(chat.encode_prompt(
        tok, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": e["input"]}], 120)[0]))
        for i, e in enumerate(data)]
    answers = [tok.encode(str(int(e["output"]) + rng.randint(-3, 3)) + " is the sum")[:rng.randint(2, 8)]
               for e in data for _ in range(8)]
    group = reinforcement.Group(prompts, answers, [""] * 32, [rng.random() for _ in range(32)], 0.0)
    rs = ReinforcementSettings(group_size=8, kl_beta=0.04, temperature=1.0, iterations=2)
    reference = reinforcement.ReferenceWeights(model)
    on = Sharing.decide(model, packing=False, gradient_checkpointing=False, distributed=False)
    original = logits.only
    paths = {"now": (on, original), "unshared": (None, original),
             "before_issue_52": (None, lambda m, w: contextlib.nullcontext())}
    best: dict = {name: None for name in paths}
    for _ in range(repeats):
        for name, (sharing, only) in paths.items():
            logits.only = only
            started = time.perf_counter()
            reinforcement.backward(model, group, rs, micro_batch=8, pad_id=chat.pad_token_id(tok), device="cpu",
                                   reference=reference, passes=rs.iterations, between=lambda: None, sharing=sharing)
            took = time.perf_counter() - started
            model.zero_grad(set_to_none=True)
            best[name] = took if best[name] is None else min(best[name], took)
            print(name, round(took, 2), "s", file=sys.stderr, flush=True)
    logits.only = original
    return {"seconds": {k: round(v, 2) for k, v in best.items()}, "repeats": repeats,
            "speedup_over_before": round(best["before_issue_52"] / best["now"], 2),
            "speedup_of_sharing": round(best["unshared"] / best["now"], 2),
            "prompt_tokens": [len(p.ids) for p in prompts], "answer_tokens": [len(a) for a in answers],
            "threads": torch.get_num_threads(), "load": open("/proc/loadavg").read().split()[:3]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--model", default=None, help="model folder (default: scripts/real-base)")
    parser.add_argument("--keep", default=None, help="run directory to keep (default: a temporary one)")
    parser.add_argument("--update-paths", type=int, default=0, metavar="N",
                        help="time the policy update's paths side by side, N repeats (no stages run)")
    args = parser.parse_args()
    model_dir = args.model or subprocess.run([str(REPO / "scripts" / "real-base")], check=True, text=True,
                                             capture_output=True).stdout.strip()
    if args.update_paths:
        print("PATHS " + json.dumps(update_paths(model_dir, args.update_paths)))
        return
    from tt_engine_adapter.testing.harness import Run
    from tt_stagekit.graders import from_spec

    data = examples(200, 1234)
    spec = {"name": "addition", "engine": "adapter", "base_model": model_dir, "base_model_revision": None,
            "system_prompt": SYSTEM, "guidelines": [], "constraints": [], "datasets": None,
            "hyperparameters": {**SFT, "seed": args.seed},
            "reinforcement": {**GRPO, "steps": args.steps}}
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="tt-grpo-real-"))
    run = Run(root, spec, data[:160], data[160:])
    graders = from_spec(run.spec)
    seconds, result = {}, {"seed": args.seed, "model": model_dir, "graders": [g.describe() for g in graders.graders],
                           "train_prompts": 160, "held_out": 40, "sft": SFT, "grpo": run.spec["reinforcement"]}
    for stage in ("prepare", "prefetch", "baseline", "train", "candidate", "reinforce"):
        started = time.perf_counter()
        out = run.stage(stage)
        seconds[stage] = round(time.perf_counter() - started, 1)
        print(stage, seconds[stage], "s", file=sys.stderr, flush=True)
        if stage == "baseline":
            result["base"] = score(run, "baseline", graders)
        if stage == "candidate":
            result["sft"] = {**score(run, "candidate", graders)}
        if stage == "reinforce":
            result["reinforce_series"] = out["result"]["series"]["reinforce.reward"]
            result["reinforce_metrics"] = out["result"]["metrics"]
    # the GRPO adapter evaluated by the same candidate stage (its adapter in place of the SFT one)
    sft_done = run.done["train"]
    run.done["train"] = {"dir": sft_done["dir"], "result": {**sft_done["result"], "outputs": {
        **sft_done["result"]["outputs"], "adapter": run.done["reinforce"]["result"]["outputs"]["adapter"]}}}
    started = time.perf_counter()
    run.stage("candidate")
    seconds["candidate_grpo"] = round(time.perf_counter() - started, 1)
    result["sft_grpo"] = score(run, "candidate", graders)
    result["seconds"] = seconds
    result["total_seconds"] = round(sum(seconds.values()), 1)
    result["load"] = open("/proc/loadavg").read().split()[:3]
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
