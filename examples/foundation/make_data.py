"""Regenerate this example's corpus and validation text (deterministic; no downloads).

    python examples/foundation/make_data.py

corpus.jsonl: little counting stories, sums written as sentences, and question /
answer lines; validation.txt: held-out text of the same kinds from another seed
(paragraphs separated by blank lines), so BPB is measured on text the model
never trained on.
"""

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
NAMES = ["Ada", "Bo", "Cy", "Dee", "Eli", "Fay", "Gus", "Hal", "Ivy", "Jo", "Kai", "Lu", "Mo", "Nia", "Oz", "Pia"]
THINGS = ["apples", "books", "coins", "pens", "stones", "cups", "shells", "cards", "beads", "plums", "keys", "hats"]
PLACES = ["market", "garden", "library", "harbor", "school", "bakery", "river", "hill"]


def sentence(r: random.Random) -> str:
    a, b = r.randint(0, 50), r.randint(0, 50)
    name, thing, place = r.choice(NAMES), r.choice(THINGS), r.choice(PLACES)
    kind = r.randrange(6)
    if kind == 0:
        return f"{name} has {a} {thing} and finds {b} more at the {place}. Now {name} has {a + b} {thing}."
    if kind == 1:
        return f"What is {a} plus {b}? {a + b}"
    if kind == 2:
        return f"{a} plus {b} is {a + b}."
    if kind == 3:
        return f"At the {place}, {name} counted {a} {thing} in the morning and {b} in the evening: {a + b} {thing} in all."
    if kind == 4:
        return f"Add {a} and {b}. The sum is {a + b}."
    return f"{name} walked to the {place} with {a} {thing}, gave away none, and came home with {a} {thing}."


def document(r: random.Random) -> str:
    return " ".join(sentence(r) for _ in range(r.randint(1, 4)))


def main() -> None:
    r = random.Random(20261129)
    with open(HERE / "corpus.jsonl", "w", encoding="utf-8") as handle:
        for _ in range(7000):
            handle.write(json.dumps({"text": document(r)}) + "\n")
    r = random.Random(7)
    with open(HERE / "validation.txt", "w", encoding="utf-8") as handle:
        handle.write("\n\n".join(document(r) for _ in range(400)) + "\n")


if __name__ == "__main__":
    main()
