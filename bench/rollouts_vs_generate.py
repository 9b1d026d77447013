"""Bench: GRPO rollouts on tt's batched generator against plain `model.generate`, in the same process.

Run in the adapter's test environment (plugins/adapter/.venv) on the real base (scripts/real-base):

    OMP_WAIT_POLICY=PASSIVE plugins/adapter/.venv/bin/python bench/rollouts_vs_generate.py \
        [--prompts 8] [--group 8] [--max-new 48] [--repeats 2] [--model FOLDER]

Both draw `group` sampled answers (temperature 1.0) to each of `prompts` chat prompts (the model's own template),
at most `max_new` tokens each, and stop a row at the end-of-turn token or EOS:

- tt: `runtime.rollouts.Generator` (the serving engine's KV cache and masks; the prompt of a group prefilled once,
  rows that end leave the batch at once), all answers in one call with up to prompts × group rows at a time;
- generate: one `model.generate(do_sample=True, num_return_sequences=group)` over all prompts at once
  (left-padded, the same rows at a time), as TRL's GRPOTrainer does without vLLM;
- generate_per_prompt: one such call per prompt (a group at a time), as a hand-written rollout loop does.

Figures: answer tokens per second (tokens up to and including each row's stop) and the seconds per call,
best of `repeats` after one warm-up call each. Prints `RESULT {...}`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
REPO = Path(__file__).resolve().parents[1]
QUESTIONS = ["What is 37 + 45?", "Name a fruit that is red.", "Write one sentence about the sea.",
             "Give a synonym of happy.", "What is the capital of France?", "Describe a cat in five words.",
             "Is 17 a prime number?", "Say hello in Spanish.", "What colour is the sky at noon?",
             "Count from one to five.", "Name a planet.", "What is 9 times 7?"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--max-new", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--model", default=None, help="model folder (default: scripts/real-base)")
    args = parser.parse_args()
    model_dir = args.model or subprocess.run([str(REPO / "scripts" / "real-base")], check=True, text=True,
                                             capture_output=True).stdout.strip()

    import torch

    from tt_engine_adapter.runtime import chat, model_source
    from tt_engine_adapter.runtime.rollouts import Generator, Sample

    torch.set_num_threads(int(os.environ.get("TT_NUM_THREADS", len(os.sched_getaffinity(0)))))
    tokenizer = model_source.load_tokenizer(model_dir)
    model = model_source.load_model(model_dir, "cpu", torch.float32).eval()
    stops, pad = chat.stop_ids(tokenizer), chat.pad_token_id(tokenizer)
    prompts = [chat.encode_prompt(tokenizer, [{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}], 256)[0]
               for i in range(args.prompts)]
    rows = args.prompts * args.group

    def tt_call(seed: int) -> int:
        generator = Generator(model, stops, pad, "cpu", rows)
        samples = [Sample(p, seed * 100_003 + i) for i, p in enumerate(p for p in prompts for _ in range(args.group))]
        return sum(len(a) for a in generator.sample(samples, args.max_new, 1.0))

    def hf_call(seed: int, chosen=None) -> int:
        torch.manual_seed(seed)
        chosen = chosen or prompts
        width = max(len(p) for p in chosen)
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in chosen])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in chosen])
        with torch.inference_mode():
            out = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0, top_p=1.0,
                                 top_k=0, num_return_sequences=args.group, max_new_tokens=args.max_new,
                                 eos_token_id=stops, pad_token_id=pad)
        tokens = 0
        for row in out[:, width:].tolist():
            cut = next((k for k, t in enumerate(row) if t in stops), None)
            tokens += len(row) if cut is None else cut + 1
        return tokens

    def per_prompt_call(seed: int) -> int:
        return sum(hf_call(seed * 1000 + i, [p]) for i, p in enumerate(prompts))

    result = {"model": model_dir, "prompts": args.prompts, "group": args.group, "max_new_tokens": args.max_new,
              "threads": torch.get_num_threads(), "load": open("/proc/loadavg").read().split()[:3]}
    for name, call in (("tt", tt_call), ("generate", hf_call), ("generate_per_prompt", per_prompt_call)):
        call(0)  # warm-up
        best = None
        for repeat in range(args.repeats):
            started = time.perf_counter()
            tokens = call(repeat + 1)
            seconds = time.perf_counter() - started
            if best is None or tokens / seconds > best[0] / best[1]:
                best = (tokens, seconds)
        result[name] = {"answer_tokens": best[0], "seconds": round(best[1], 3),
                        "tokens_per_second": round(best[0] / best[1], 1)}
        print(name, result[name], file=sys.stderr, flush=True)
    result["speedup"] = round(result["tt"]["tokens_per_second"] / result["generate"]["tokens_per_second"], 2)
    result["speedup_per_prompt"] = round(result["tt"]["tokens_per_second"]
                                         / result["generate_per_prompt"]["tokens_per_second"], 2)
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
