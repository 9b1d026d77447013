"""Regenerate this example's spec examples (deterministic; no downloads).

    python examples/adapter-real/make_data.py

Customer messages routed to one of five teams (billing, shipping, returns, account, technical). Each message is
one of several phrasings of a concrete problem with a product filled in, so the held-out messages (the host holds
out a fifth of the examples by a hash of their text) are new sentences about problems the training messages
also describe. SmolLM2-135M-Instruct, asked as it ships, answers in sentences and never with the bare team name:
its held-out exact match is 0; a few LoRA steps teach it the labels.
"""

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
PRODUCTS = ["headphones", "coffee maker", "desk lamp", "backpack", "phone case", "blender", "keyboard", "jacket"]
PROBLEMS = {
    "billing": ["I was charged twice for my {p}", "my card was billed but the {p} order shows unpaid",
                "the invoice for my {p} has the wrong price", "I need a receipt for the {p} I bought"],
    "shipping": ["my {p} has not arrived after two weeks", "the tracking number for my {p} does not work",
                 "the {p} was delivered to the wrong address", "can you ship my {p} faster"],
    "returns": ["I want to send back the {p}", "the {p} is the wrong size, how do I return it",
                "how long does a refund for the returned {p} take", "I need a return label for my {p}"],
    "account": ["I cannot log in to see my {p} order", "please change the email on my account, I ordered a {p}",
                "I forgot my password and want to reorder the {p}", "delete my account after the {p} arrives"],
    "technical": ["the {p} stopped working after a day", "the {p} will not turn on",
                  "the app does not connect to my {p}", "the {p} makes a strange noise"],
}


def examples(seed: int = 5, per_team: int = 12, products: list[str] = PRODUCTS) -> list[dict]:
    """`per_team` messages a team, each a problem phrasing with one of `products` filled in (examples/adapter-dpo
    and examples/adapter-grpo call it with their own products, seed and size)."""
    rng = random.Random(seed)
    rows = []
    for team, problems in PROBLEMS.items():
        pairs = [(problem, product) for problem in problems for product in products]
        for problem, product in rng.sample(pairs, per_team):
            rows.append({"input": problem.format(p=product), "output": team})
    rng.shuffle(rows)
    return rows


def write(path: Path, **settings) -> None:
    """Replace the examples of the spec at `path` with `examples(**settings)`."""
    spec = json.loads(path.read_text(encoding="utf-8"))
    spec["examples"] = examples(**settings)
    path.write_text(json.dumps(spec, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def main() -> None:
    write(HERE / "tunedtensor.json")


if __name__ == "__main__":
    main()
