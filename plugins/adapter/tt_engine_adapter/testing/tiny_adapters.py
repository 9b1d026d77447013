"""Train a few tiny LoRA adapters on one tiny base, each to answer its own word, for multi-adapter tests.

    python -m tt_engine_adapter.testing.tiny_adapters BASE OUTDIR [--count 4] [--steps 40]

Adapter k (`OUTDIR/adapter-k`) is trained from its own seed for `steps` Adam steps on review prompts whose
answer is WORDS[k], with SYSTEMS[k] as its system message, so the adapters' greedy answers differ. Each folder
is what the train stage writes: PEFT's files, `tt-adapter.json` (base, system message) and an
artifact manifest naming the base (`runtime.manifest`). Seconds on CPU. Prints the folders as a JSON list.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]
SYSTEMS = [f"You are tuned adapter {word}. Answer with one word." for word in WORDS]


def build(base: str | Path, outdir: str | Path, count: int = 4, steps: int = 40) -> list[Path]:
    import torch
    from peft import LoraConfig, get_peft_model

    from tt_engine_adapter.runtime import chat, manifest, model_source
    from tt_engine_adapter.testing.tiny_model import sentiment_examples

    base, outdir = Path(base).absolute(), Path(outdir)
    info_base = model_source.fetch(str(base))
    tokenizer = model_source.load_tokenizer(str(base))
    eot = chat.end_of_turn_id(tokenizer)
    folders = []
    for k in range(count):
        torch.manual_seed(1000 + k)
        model = model_source.load_model(str(base), "cpu", torch.float32)
        model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules="all-linear",
                                                 task_type="CAUSAL_LM"))
        rows = []
        for example in sentiment_examples(8, seed=k):
            messages = [{"role": "system", "content": SYSTEMS[k]}, {"role": "user", "content": example["input"]}]
            prompt = chat.encode_text(tokenizer, chat.render_prompt(tokenizer, messages))
            answer = chat.encode_text(tokenizer, WORDS[k]) + [eot]
            rows.append((prompt, answer))
        optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-2)
        model.train()
        for step in range(steps):
            prompt, answer = rows[step % len(rows)]
            ids = torch.tensor([prompt + answer])
            labels = torch.tensor([[-100] * len(prompt) + answer])
            loss = model(input_ids=ids, labels=labels).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        folder = outdir / f"adapter-{k}"
        model.save_pretrained(str(folder), safe_serialization=True)
        digest = hashlib.sha256(SYSTEMS[k].encode("utf-8")).hexdigest()
        (folder / "tt-adapter.json").write_text(json.dumps({
            "format": 1, "base_model": info_base, "system_message": SYSTEMS[k], "system_message_sha256": digest,
            "chat": {"enable_thinking": False, "add_special_tokens": False}}, indent=2) + "\n")
        manifest.write_manifest(folder, "adapter", info_base, digest)
        folders.append(folder)
    return folders


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base")
    parser.add_argument("outdir")
    parser.add_argument("--count", type=int, default=4)
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args(argv)
    print(json.dumps([str(p) for p in build(args.base, args.outdir, args.count, args.steps)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
