"""Build a tiny, randomly initialised Hugging Face causal LM folder for tests.

    python -m tt_engine_adapter.testing.tiny_model OUTDIR [--arch llama|qwen3]

The tokenizer is a byte-level BPE trained with `tokenizers` on a small
deterministic corpus, wrapped as `PreTrainedTokenizerFast` (transformers 5
saves it as `TokenizersBackend`, 4.x as `PreTrainedTokenizerFast`) with a chat
template and a dedicated pad token (never EOS). `llama` uses a Llama-3 style
template (`<|eot_id|>` ends a turn); `qwen3` uses a ChatML template with a
Qwen3-style empty thinking block switched by `enable_thinking`. The model is a
tiny `LlamaConfig` / `Qwen3Config` saved with `save_pretrained` and checked by
loading it back offline. No hub is reached.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from pathlib import Path

POSITIVE = ["great", "wonderful", "superb", "lovely", "brilliant", "delightful", "excellent", "charming",
            "fantastic", "moving", "fresh", "clever"]
NEGATIVE = ["awful", "boring", "dreadful", "terrible", "dull", "clumsy", "bland", "tedious",
            "painful", "messy", "weak", "stale"]
SUBJECTS = ["the film", "the plot", "the acting", "the music", "the ending", "the script", "the cast",
            "the story", "the pacing", "the dialogue", "this movie", "the sequel"]
FRAMES = ["{s} was {a}", "i thought {s} was {a}", "{s} felt {a}", "honestly {s} is {a}",
          "overall {s} was {a}", "{s} seemed {a} to me"]

LLAMA_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] + '<|eot_id|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)

QWEN3_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}"
    "{{ '<|im_start|>assistant\n<think>\n\n</think>\n\n' + message['content'] + '<|im_end|>\n' }}"
    "{% else %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
    "{% if enable_thinking is defined and enable_thinking is false %}{{ '<think>\n\n</think>\n\n' }}{% endif %}"
    "{% endif %}"
)

SPECIALS = {
    "llama": {
        "tokens": ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                   "<|eot_id|>", "<|finetune_right_pad_id|>"],
        "bos": "<|begin_of_text|>", "eos": "<|eot_id|>", "pad": "<|finetune_right_pad_id|>",
        "template": LLAMA_TEMPLATE,
    },
    "qwen3": {
        "tokens": ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<|pad|>"],
        "bos": None, "eos": "<|im_end|>", "pad": "<|pad|>",
        "template": QWEN3_TEMPLATE,
    },
}


def sentiment_examples(count: int, seed: int = 0) -> list[dict[str, str]]:
    """Deterministic, distinct sentiment examples: {"input": review, "output": "positive"|"negative"}."""
    rng = random.Random(seed)
    seen: set[str] = set()
    rows: list[dict[str, str]] = []
    while len(rows) < count:
        label = "positive" if len(rows) % 2 == 0 else "negative"
        adjective = rng.choice(POSITIVE if label == "positive" else NEGATIVE)
        text = rng.choice(FRAMES).format(s=rng.choice(SUBJECTS), a=adjective)
        if text in seen:
            continue
        seen.add(text)
        rows.append({"input": text, "output": label})
    return rows


def _corpus() -> list[str]:
    lines = [row["input"] for row in sentiment_examples(200, seed=123)]
    lines += ["positive", "negative", "Classify the sentiment of the review.", "Answer with one word.",
              "system", "user", "assistant", "Follow the demonstrated behavior.", "Guidelines:", "Constraints:",
              "0123456789 {}[]:,.\"'- abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ"]
    return lines


def build_tokenizer(arch: str, vocab_size: int = 512):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    info = SPECIALS[arch]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(info["tokens"]),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    kwargs = {"eos_token": info["eos"], "pad_token": info["pad"], "model_input_names": ["input_ids", "attention_mask"]}
    if info["bos"]:
        kwargs["bos_token"] = info["bos"]
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, **kwargs)
    fast.chat_template = info["template"]
    fast.padding_side = "left"
    return fast


def build(outdir: str | Path, arch: str = "llama", hidden: int = 64, layers: int = 2, seed: int = 0,
          vocab_size: int = 512) -> Path:
    """Write a tiny model folder (config, safetensors weights, tokenizer, chat template) to `outdir`."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen3Config

    if arch not in SPECIALS:
        raise ValueError(f"arch must be one of {sorted(SPECIALS)}")
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(arch, vocab_size)
    info = SPECIALS[arch]
    common = dict(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        eos_token_id=tokenizer.convert_tokens_to_ids(info["eos"]),
        pad_token_id=tokenizer.convert_tokens_to_ids(info["pad"]),
        bos_token_id=tokenizer.convert_tokens_to_ids(info["bos"]) if info["bos"] else None,
        tie_word_embeddings=False,
        initializer_range=0.25,  # wide enough that LoRA alone can move the logits of a random tiny model
        dtype="float32",
    )
    if arch == "llama":
        config = LlamaConfig(**common)
    else:
        config = Qwen3Config(head_dim=hidden // 4, **common)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    model.save_pretrained(outdir, safe_serialization=True)
    tokenizer.save_pretrained(outdir)
    _check_offline(outdir)
    return outdir


def _check_offline(outdir: Path) -> None:
    os.environ["HF_HUB_OFFLINE"] = "1"
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(outdir)
    AutoModelForCausalLM.from_pretrained(outdir)
    if tokenizer.pad_token_id is None or tokenizer.pad_token_id == tokenizer.eos_token_id:
        raise RuntimeError("tiny tokenizer lost its dedicated pad token")
    tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir")
    parser.add_argument("--arch", choices=sorted(SPECIALS), default="llama")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    path = build(args.outdir, args.arch, args.hidden, args.layers, args.seed)
    print(json.dumps({"model": str(path.resolve()), "arch": args.arch}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
