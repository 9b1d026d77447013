"""Regenerate this example's corpus and validation text (deterministic; no downloads).

    python examples/foundation/make_data.py

corpus.jsonl: documents of one to four sentences, each stating the sum of two digits (0 to
LARGEST) in one of three phrasings ("What is 4 plus 7? 11", "4 plus 7 is 11.", "Add 4 and 7. The
sum is 11."). The question phrasing is never used for a
pair of numbers one of the spec's examples asks about (in either order): the corpus never holds
an example's question, only its sum stated in other words. So a right answer to a held-out
prompt shows the model answering a question it was never asked, neither in pretraining nor in
SFT, from a sum it read in pretraining. validation.txt: held-out text of the same kinds from
another seed (paragraphs separated by blank lines), so BPB is measured on text the model never
trained on.
"""

import json
import random
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
LARGEST = 9
DOCUMENTS = 12000


def example_pairs() -> set[tuple[int, int]]:
    """Every (a, b) the spec's examples ask about, both orders: never asked in the corpus."""
    spec = json.loads((HERE / "tunedtensor.json").read_text(encoding="utf-8"))
    pairs = set()
    for example in spec["examples"]:
        a, b = map(int, re.findall(r"\d+", example["input"]))
        pairs |= {(a, b), (b, a)}
    return pairs


def sentence(r: random.Random, asked: set[tuple[int, int]]) -> str:
    a, b = r.randint(0, LARGEST), r.randint(0, LARGEST)
    kind = r.randrange(3)
    while kind == 0 and (a, b) in asked:
        kind = r.randrange(3)
    if kind == 0:
        return f"What is {a} plus {b}? {a + b}"
    if kind == 1:
        return f"{a} plus {b} is {a + b}."
    return f"Add {a} and {b}. The sum is {a + b}."


def document(r: random.Random, asked: set[tuple[int, int]]) -> str:
    return " ".join(sentence(r, asked) for _ in range(r.randint(1, 4)))


def main() -> None:
    asked = example_pairs()
    r = random.Random(20261129)
    with open(HERE / "corpus.jsonl", "w", encoding="utf-8") as handle:
        for _ in range(DOCUMENTS):
            handle.write(json.dumps({"text": document(r, asked)}) + "\n")
    r = random.Random(7)
    with open(HERE / "validation.txt", "w", encoding="utf-8") as handle:
        handle.write("\n\n".join(document(r, asked) for _ in range(400)) + "\n")


if __name__ == "__main__":
    main()
