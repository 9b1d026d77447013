"""GGUF parity with llama.cpp: greedy agreement per quantization and what the llama.cpp environment costs.

    plugins/foundation/.venv/bin/python -P bench/gguf_parity.py [--prompts 20] [--tokens 24] [--cold]

A tiny foundation model (random weights, as plugins/foundation/tests/test_export_gguf.py builds it) is
exported through the real entry point at f32, f16, bf16, q8_0 and q4_0; llama.cpp (llama-cpp-python from
scripts/llama-cpp-env) answers the same chat prompts greedily, and each quantization's answers are compared
token by token with the engine's own greedy generate. Prints one JSON object: the agreement rate and the
share of prompts answered identically per quant, the export and llama.cpp times, and the environment's
warm check time. --cold builds the environment into a fresh folder first and reports that build's time
(docs/testing.md has the figures).
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

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "plugins" / "foundation" / "tests"))

QUANTS = ("f32", "f16", "bf16", "q8_0", "q4_0")


def environment(cold: bool) -> tuple[Path, dict]:
    figures: dict = {}
    env = dict(os.environ)
    if cold:
        env["TT_TEST_ENVS"] = tempfile.mkdtemp(prefix="tt-bench-llama-cpp-")
        start = time.monotonic()
        subprocess.run([str(REPO / "scripts" / "llama-cpp-env")], env=env, check=True, capture_output=True)
        figures["cold_build_s"] = round(time.monotonic() - start, 1)
    start = time.monotonic()
    proc = subprocess.run([str(REPO / "scripts" / "llama-cpp-env")], env=env, check=True, capture_output=True,
                          text=True)
    figures["warm_check_s"] = round(time.monotonic() - start, 2)
    return Path(proc.stdout.strip().splitlines()[-1]), figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=20)
    parser.add_argument("--tokens", type=int, default=24)
    parser.add_argument("--cold", action="store_true")
    args = parser.parse_args()

    from test_export_gguf import SYSTEM, TEXTS, run, tiny_model
    from tt_engine_foundation.runtime import tokenizer as T
    from tt_engine_foundation.runtime.chat import render_prompt
    from tt_engine_foundation.runtime.generate import generate
    from tt_engine_foundation.runtime.model_io import load_model_dir
    from tt_stagekit.gguf import llama_cpp_env

    python, figures = environment(args.cold)
    rng = random.Random(0)
    questions = [f"What is {rng.randint(0, 999)} plus {rng.randint(0, 9999)}?" for _ in range(args.prompts)]
    with tempfile.TemporaryDirectory(prefix="tt-bench-gguf-") as tmp:
        root = Path(tmp)
        tok = T.train(TEXTS * 30, 400)
        source, sha = tiny_model(root, tok)
        model = load_model_dir(source, "cpu").eval()
        prompts = [render_prompt(tok, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}], 64)
                   for q in questions]
        stop = T.special_id(tok, T.ASSISTANT_END)
        want = generate(model, prompts, args.tokens, stop, T.special_id(tok, T.PAD), "cpu")
        results = {}
        for quant in QUANTS:
            start = time.monotonic()
            proc = run("tt_engine_foundation.stages.export_gguf",
                       {"source": str(source), "out": str(root / quant), "model_id": "bench", "format": "gguf",
                        "quant": quant, "system_message": SYSTEM, "system_message_sha256": sha}, root / f"{quant}.json")
            if proc.returncode != 0:
                raise SystemExit(proc.stdout + proc.stderr)
            exported = time.monotonic() - start
            start = time.monotonic()
            got = llama_cpp_env.run_gguf(python, {"gguf": str(root / quant / "model.gguf"), "prompts": prompts,
                                                  "max_new_tokens": args.tokens, "stop": [stop], "n_ctx": 64})["greedy"]
            pairs = [(a, b) for w, g in zip(want, got) for a, b in zip(w, g)]
            results[quant] = {"token_agreement": round(sum(a == b for a, b in pairs) / max(1, len(pairs)), 4),
                              "identical_answers": sum(w == g for w, g in zip(want, got)), "prompts": len(prompts),
                              "export_s": round(exported, 1), "llama_cpp_s": round(time.monotonic() - start, 1),
                              "bytes": (root / quant / "model.gguf").stat().st_size}
    print(json.dumps({"environment": figures, "load_average": os.getloadavg(), "quants": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
