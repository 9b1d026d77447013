"""Bench: tt's batched evaluation (left padding + KV cache, batch 16) against one prompt at a time, and the
batch with its shared prompt prefix prefilled once against every row run whole.

    <adapter env>/bin/python bench/adapter_eval_batching.py [--device cpu|cuda] [--prompts 64] [--batch 16]
        [--base MODEL_DIR] [--system-repeat N] [--no-single]

Same model (a tiny Llama-style model built locally, or `--base`), same prompts, same greedy
settings, same function (`runtime.generate.generate`), only `batch_size` and
`share_prefix` differ. `--system-repeat` repeats the system prompt's sentence N times (a longer compiled system
prompt). Checks that all arms give identical answers and prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--base", default=None, help="a local model directory instead of the tiny model")
    parser.add_argument("--system-repeat", type=int, default=1)
    parser.add_argument("--no-single", action="store_true", help="skip the one-at-a-time arm")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repeats; the fastest of each is kept")
    args = parser.parse_args()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tt_engine_adapter.runtime.generate import generate
    from tt_engine_adapter.testing.tiny_model import build, sentiment_examples

    if os.environ.get("TT_NUM_THREADS"):
        torch.set_num_threads(int(os.environ["TT_NUM_THREADS"]))
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = args.base or build(Path(tmp) / "m", arch="llama", hidden=args.hidden, layers=args.layers)
        tok = AutoTokenizer.from_pretrained(model_dir)
        model = AutoModelForCausalLM.from_pretrained(model_dir).to(args.device).eval()
    system = " ".join(["Classify the sentiment of the review."] * args.system_repeat)
    prompts = [{"id": str(i), "messages": [{"role": "system", "content": system},
                                           {"role": "user", "content": e["input"]}]}
               for i, e in enumerate(sentiment_examples(args.prompts, seed=3))]
    settings = dict(max_new_tokens=args.max_new_tokens, max_seq_length=1024, device=args.device)
    generate(model, tok, prompts[:4], batch_size=4, **settings)  # warm-up
    timings: dict[str, float] = {}
    answers = {}
    for _ in range(args.repeats):  # interleaved, min kept: background load on a shared machine hits both alike
        arms = [(f"batch_{args.batch}", args.batch, True), (f"batch_{args.batch}_whole", args.batch, False)]
        for name, batch, share in ([] if args.no_single else [("one_at_a_time", 1, True)]) + arms:
            started = time.perf_counter()
            answers[name] = generate(model, tok, prompts, batch_size=batch, share_prefix=share, **settings)
            timings[name] = min(timings.get(name, float("inf")), time.perf_counter() - started)
    batched, whole = timings[f"batch_{args.batch}"], timings[f"batch_{args.batch}_whole"]
    print(json.dumps({
        "device": args.device, "model": args.base or f"tiny hidden {args.hidden} layers {args.layers}",
        "prompts": args.prompts, "max_new_tokens": args.max_new_tokens, "system_tokens": len(tok(system).input_ids),
        "prompts_per_second": {k: round(args.prompts / v, 2) for k, v in timings.items()},
        "speedup": round(timings["one_at_a_time"] / batched, 2) if "one_at_a_time" in timings else None,
        "shared_prefix_speedup": round(whole / batched, 2),
        "identical_answers": len({json.dumps(a) for a in answers.values()}) == 1,
    }, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
