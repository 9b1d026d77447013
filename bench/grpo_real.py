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

`--update-paths N`: instead, the policy update alone, N interleaved repeats: one step's group (4 prompts × 8
answers of up to 8 tokens, the task's chat prompts, KL to the reference, 2 iterations so the old log-probs
matter) through `reinforcement.backward` as it runs now (the rows as a prefix tree, logits only on the answer
tokens), as it runs now without sharing (`unshared`), and as the last commit before issue 52 ran it
(`before_issue_52`: that tree's adapter package, checked out with git worktree at `--before-tree`, in a worker
process fed one update at a time, so the paths interleave); and the rollouts of that step (32 answers of up to 8
tokens, the stage's generator, whose group prefill predates issue 52). Prints `PATHS {...}`: each path's best
seconds, the ratios, a step's seconds (rollouts + update) and `step_against_before` (the issue's target: ≤ 1/3),
and the load average.
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
PRE_52 = "e4fbd4c"  # the last commit before issue 52: its update is the `before_issue_52` path
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


def update_setup(model_dir: str) -> tuple:
    """The model (LoRA on every linear layer), tokenizer, one step's group and settings, from whichever adapter
    package is importable (this tree's, or an older tree's in the `--update-worker`)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tt_engine_adapter.runtime import chat
    from tt_engine_adapter.runtime.config import ReinforcementSettings
    from tt_engine_adapter.runtime.reinforcement import train as reinforcement
    from tt_engine_adapter.runtime.reinforcement.prompts import Prompt

    torch.manual_seed(0)
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
    return model, tok, group, rs, reinforcement.ReferenceWeights(model)


def update_worker(model_dir: str) -> None:
    """`--update-worker`: the update as an older tree's adapter package runs it (PYTHONPATH set by the parent),
    one timed update per line read from stdin, its seconds printed per line."""
    from tt_engine_adapter.runtime import chat
    from tt_engine_adapter.runtime.reinforcement import train as reinforcement

    model, tok, group, rs, reference = update_setup(model_dir)
    print("READY", flush=True)
    for _ in sys.stdin:
        started = time.perf_counter()
        reinforcement.backward(model, group, rs, micro_batch=8, pad_id=chat.pad_token_id(tok), device="cpu",
                               reference=reference, passes=rs.iterations, between=lambda: None)
        model.zero_grad(set_to_none=True)
        print(round(time.perf_counter() - started, 4), flush=True)


def update_paths(model_dir: str, repeats: int, before_tree: Path) -> dict:
    import torch

    from tt_engine_adapter.runtime import chat
    from tt_engine_adapter.runtime.prefix import Sharing
    from tt_engine_adapter.runtime.reinforcement import train as reinforcement
    from tt_engine_adapter.runtime.rollouts import Generator, Sample

    model, tok, group, rs, reference = update_setup(model_dir)
    on = Sharing.decide(model, packing=False, gradient_checkpointing=False, distributed=False)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(before_tree / "plugins" / "adapter"), str(before_tree / "sdk" / "stagekit")])}
    worker = subprocess.Popen([sys.executable, "-P", str(Path(__file__).resolve()), "--model", model_dir,
                               "--update-worker"], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert worker.stdout.readline().strip() == "READY", "the pre-issue-52 worker did not start"
    generator = Generator(model, chat.stop_ids(tok), chat.pad_token_id(tok), "cpu", rs.rollout_batch_size)
    samples = [Sample(list(p.ids), reinforcement.sample_seed(7, 1, slot, k)) for slot, p in enumerate(group.prompts)
               for k in range(8)]
    best: dict = {"now": None, "unshared": None, "before_issue_52": None, "rollouts": None}
    for _ in range(repeats):
        for name in best:
            started = time.perf_counter()
            if name == "before_issue_52":
                worker.stdin.write("go\n")
                worker.stdin.flush()
                took = float(worker.stdout.readline())
            elif name == "rollouts":
                generator.sample(samples, 8, rs.temperature, rs.top_p)
            else:
                reinforcement.backward(model, group, rs, micro_batch=8, pad_id=chat.pad_token_id(tok), device="cpu",
                                       reference=reference, passes=rs.iterations, between=lambda: None,
                                       sharing=on if name == "now" else None)
                model.zero_grad(set_to_none=True)
            took = took if name == "before_issue_52" else time.perf_counter() - started
            best[name] = took if best[name] is None else min(best[name], took)
            print(name, round(took, 2), "s", file=sys.stderr, flush=True)
    worker.stdin.close()
    worker.wait(timeout=60)
    rollout = best.pop("rollouts")
    return {"seconds": {k: round(v, 2) for k, v in best.items()}, "repeats": repeats,
            "before_tree": subprocess.run(["git", "-C", str(before_tree), "rev-parse", "--short", "HEAD"],
                                          capture_output=True, text=True).stdout.strip(),
            "speedup_over_before": round(best["before_issue_52"] / best["now"], 2),
            "speedup_of_sharing": round(best["unshared"] / best["now"], 2),
            "rollout_seconds": round(rollout, 2),
            "step_seconds": {k: round(v + rollout, 2) for k, v in best.items()},
            "step_against_before": round((best["now"] + rollout) / (best["before_issue_52"] + rollout), 3),
            "prompt_tokens": [len(p.ids) for p in group.prompts], "answer_tokens": [len(a) for a in group.answers],
            "threads": torch.get_num_threads(), "load": open("/proc/loadavg").read().split()[:3]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--model", default=None, help="model folder (default: scripts/real-base)")
    parser.add_argument("--keep", default=None, help="run directory to keep (default: a temporary one)")
    parser.add_argument("--update-paths", type=int, default=0, metavar="N",
                        help="time the policy update's paths side by side, N repeats (no stages run)")
    parser.add_argument("--before-tree", type=Path, default=Path("/tmp/tt-pre52"),
                        help="a checkout of the last commit before issue 52 (e4fbd4c); made with git worktree "
                             "when missing")
    parser.add_argument("--update-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.update_worker:
        update_worker(args.model)
        return
    model_dir = args.model or subprocess.run([str(REPO / "scripts" / "real-base")], check=True, text=True,
                                             capture_output=True).stdout.strip()
    if args.update_paths:
        if not (args.before_tree / "plugins").is_dir():
            subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(args.before_tree), PRE_52],
                           check=True, capture_output=True)
        print("PATHS " + json.dumps(update_paths(model_dir, args.update_paths, args.before_tree)))
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
