"""Regenerate this example's data and specs (deterministic; no downloads).

    python examples/adapter-on-foundation/make_data.py

- foundation/corpus.jsonl, foundation/validation.txt: short movie-review
  sentences, many followed on the next line by their sentiment word, for
  pretraining a tiny GPT from scratch (validation from another seed: held
  out). The label starts a line, so it is tokenized exactly as an answer
  right after the chat template's assistant marker; a label the base model
  never saw in that form could not be reached by LoRA on the linear layers;
- foundation/tunedtensor.json: the foundation spec (chat SFT on a simple
  "repeat the review" behavior);
- adapter/tunedtensor.json: the adapter spec whose base_model is the exported
  foundation model (`../base-model`), teaching one-word sentiment labels.
"""

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
POSITIVE = ["great", "wonderful", "superb", "lovely", "brilliant", "delightful", "excellent", "charming",
            "fantastic", "moving", "fresh", "clever"]
NEGATIVE = ["awful", "boring", "dreadful", "terrible", "dull", "clumsy", "bland", "tedious",
            "painful", "messy", "weak", "stale"]
SUBJECTS = ["the film", "the plot", "the acting", "the music", "the ending", "the script", "the cast",
            "the story", "the pacing", "the dialogue", "this movie", "the sequel"]
FRAMES = ["{s} was {a}", "i thought {s} was {a}", "{s} felt {a}", "honestly {s} is {a}",
          "overall {s} was {a}", "{s} seemed {a} to me"]


def review(r: random.Random, label: str) -> str:
    words = POSITIVE if label == "positive" else NEGATIVE
    return r.choice(FRAMES).format(s=r.choice(SUBJECTS), a=r.choice(words))


def document(r: random.Random) -> str:
    parts = []
    for _ in range(r.randint(2, 5)):
        label = r.choice(["positive", "negative"])
        text = review(r, label)
        parts.append(f"{text}\n{label}" if r.random() < 0.6 else f"{text.capitalize()}.")
    return "\n".join(parts)


def distinct_reviews(r: random.Random, count: int, avoid: set[str]) -> list[tuple[str, str]]:
    rows, seen = [], set(avoid)
    while len(rows) < count:
        label = "positive" if len(rows) % 2 == 0 else "negative"
        text = review(r, label)
        if text not in seen:
            seen.add(text)
            rows.append((text, label))
    return rows


def main() -> None:
    (HERE / "foundation").mkdir(exist_ok=True)
    (HERE / "adapter").mkdir(exist_ok=True)
    r = random.Random(2026)
    with open(HERE / "foundation" / "corpus.jsonl", "w", encoding="utf-8") as out:
        for _ in range(1000):
            out.write(json.dumps({"text": document(r)}) + "\n")
    v = random.Random(99)
    (HERE / "foundation" / "validation.txt").write_text("\n\n".join(document(v) for _ in range(120)) + "\n")

    e = random.Random(7)
    echo = distinct_reviews(e, 16, set())
    labels = distinct_reviews(e, 40, {t for t, _ in echo})
    foundation = {
        "name": "review-echo",
        "description": "A tiny GPT pretrained from scratch on review sentences, then chat-tuned to repeat a review. "
                       "CPU-sized: it proves the pipeline, not capability.",
        "engine": "foundation",
        "system_prompt": "Repeat the review word for word.",
        "examples": [{"input": t, "output": t} for t, _ in echo],
        "foundation": {
            "corpus_path": "corpus.jsonl", "validation_path": "validation.txt", "depth": 2, "vocab_size": 512,
            "tokenizer_max_chars": 200000, "max_chars": 200000, "pretrain_steps": 150, "sequence_length": 96,
            "batch_size": 16, "gradient_accumulation_steps": 1, "warmup_steps": 10, "min_lr_ratio": 0.1,
            "weight_decay": 0.1, "gradient_clip": 1.0, "checkpoint_interval_steps": 50,
            "checkpoint_interval_seconds": 600, "keep_checkpoints": 2, "log_interval_steps": 10, "seed": 1337,
            "finetune_steps": 40, "rl_steps": 0, "device": "auto",
        },
    }
    adapter = {
        "name": "review-sentiment-on-foundation",
        "description": "LoRA on the exported foundation model: one-word sentiment labels (offline, CPU-sized).",
        "engine": "adapter",
        "system_prompt": "Classify the sentiment of the movie review.",
        "guidelines": ["Answer with exactly one word: positive or negative."],
        "base_model": "../base-model",
        "hyperparameters": {
            "n_epochs": 6, "learning_rate": 0.005, "batch_size": 8, "gradient_accumulation_steps": 1,
            "lora_rank": 8, "lora_alpha": 16, "lora_dropout": 0.0, "max_seq_length": 96, "max_new_tokens": 4,
            "eval_batch_size": 16, "warmup_ratio": 0.1, "seed": 7, "checkpoint_interval_steps": 20,
        },
        "examples": [{"input": t, "output": label} for t, label in labels],
    }
    for folder, spec in (("foundation", foundation), ("adapter", adapter)):
        (HERE / folder / "tunedtensor.json").write_text(json.dumps(spec, indent=2) + "\n")


if __name__ == "__main__":
    main()
