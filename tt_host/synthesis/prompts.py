"""What the teacher is asked: new inputs from the instruction and a seeded sample of training examples,
then an answer to each new input under the compiled system message.

Two kinds of request body (OpenAI chat completions):

- inputs, round r: a system turn saying what to do, and a user turn holding the compiled instruction, a
  sample of `examples_per_request` TRAINING examples (drawn with random.Random(f"{seed}:{r}"); held-out
  examples are never shown) and the request for `inputs_per_request` new inputs as a JSON array of strings;
- answer: the compiled system message as the system turn and the new input as the user turn, exactly the
  chat a trained model will see.

Both carry `seed` (the spec's seed, plus the round for inputs), so an endpoint that honours it answers a
repeated request the same way; the cache (cache.py) makes repeats free anyway.
"""

from __future__ import annotations

import random
from typing import Any, Sequence

from tt_host.synthesis.transport import loads

from tt_host.spec.synthesis import Synthesis

INPUTS_SYSTEM = ("You write new user inputs for training an assistant. Reply with only a JSON array of strings, "
                 "no prose, no code fence.")


def training_pairs(train_rows: Sequence[dict]) -> list[tuple[str, str]]:
    """(input, output) of each training row, in row order."""
    return [(row["messages"][-2]["content"], row["messages"][-1]["content"]) for row in train_rows]


def sample_examples(pairs: Sequence[tuple[str, str]], settings: Synthesis, round_index: int) -> list[tuple[str, str]]:
    """The seeded sample of training examples round `round_index` shows."""
    count = min(settings.examples_per_request, len(pairs))
    return random.Random(f"{settings.seed}:{round_index}").sample(list(pairs), count)


def inputs_request(model: str, instruction: str, pairs: Sequence[tuple[str, str]], settings: Synthesis,
                   round_index: int) -> dict[str, Any]:
    shown = "\n\n".join(f"Input: {prompt}\nAnswer: {answer}"
                        for prompt, answer in sample_examples(pairs, settings, round_index))
    count = settings.inputs_per_request
    user = (f"The assistant follows this instruction:\n<<<\n{instruction}\n>>>\n\n"
            f"Examples of inputs it receives, with the answers it gives:\n\n{shown}\n\n"
            f"Write {count} new input{'s' if count != 1 else ''} a user could send it, in the same domain and style, "
            f"different from the examples and from each other. Reply with a JSON array of {count} "
            f"string{'s' if count != 1 else ''} and nothing else.")
    return {"model": model, "messages": [{"role": "system", "content": INPUTS_SYSTEM},
                                         {"role": "user", "content": user}],
            "temperature": settings.temperature, "max_tokens": settings.max_tokens,
            "seed": settings.seed + round_index}


def answer_request(model: str, system_message: str, prompt: str, settings: Synthesis) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "system", "content": system_message},
                                         {"role": "user", "content": prompt}],
            "temperature": settings.answer_temperature, "max_tokens": settings.max_tokens, "seed": settings.seed}


def parse_inputs(text: str) -> list[str] | None:
    """The strings of a JSON array reply (a ```json fence around it is tolerated); None when it is not one."""
    body = text.strip()
    if body.startswith("```"):
        body = body.split("\n", 1)[1] if "\n" in body else ""
        body = body.rsplit("```", 1)[0]
    try:
        value = loads(body)  # depth-limited: a deeply nested reply is not a list of inputs, never a crash
    except ValueError:
        return None
    if not isinstance(value, list):
        return None
    return [item.strip() for item in value if isinstance(item, str) and item.strip()]
