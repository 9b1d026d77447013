"""The selection split of a sweep: rows carved from the training examples, never from the held-out set.

Runs in the host's interpreter. The spec's own split (tt_host.spec.split) decides the held-out examples first;
of the examples it trains on, one is a selection row when sha256("selection", NUL, salt, NUL, its rule text),
its first 64 bits read as a number in [0, 1), is below the sweep's `selection_fraction`: per example, like
the held-out rule, so editing or adding examples never moves another, and with a salt of its own so it is not
the held-out draw again. With two or more training examples neither side is empty (the lowest score is
selected, or the highest trained on). A selection row is never a held-out example or the twin of one (the
one key, tt_stagekit.sameness; twins are refused before any split, and `carve` checks it again).

`trial_spec` gives the spec a trial runs: the held-out examples removed, the selection rows in the place of
the held-out side (its `compiled.eval_rows`), so every trial is an ordinary run trained on the rest and
scored on the selection rows only, and no trial's files hold a held-out prompt.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace

from tt_host.spec.compiler import compile_spec
from tt_host.spec.loading import LoadedSpec
from tt_host.spec.split import RecordedSplit, normalize_prompt, rule_text, split_salt

SELECTION_RULE = "selection-sha256-v1"


def selection_score(salt: str, prompt: str) -> float:
    digest = hashlib.sha256(f"selection\0{salt}\0{rule_text(prompt)}".encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0 ** 64


@dataclass(frozen=True)
class Carved:
    """The spec's examples in three parts, by index into `spec.examples`."""

    held_out: tuple[int, ...]
    selection: tuple[int, ...]
    train: tuple[int, ...]


class SelectionError(ValueError):
    """The examples cannot give a selection split (too few training examples, or a selection row that is a
    held-out prompt's twin)."""


def carve(loaded: LoadedSpec, fraction: float) -> Carved:
    spec, compiled = loaded.spec, loaded.compiled
    held_ids = {row["id"] for row in compiled.eval_rows}
    indexes = range(len(spec.examples))
    held = tuple(i for i in indexes if f"ex-{i:05d}" in held_ids)
    training = [i for i in indexes if i not in held]
    if len(training) < 2:
        raise SelectionError(f"examples: {len(training)} training example(s); a sweep needs at least 2 to carve "
                             "a selection split from (add examples)")
    salt = split_salt(spec)
    scores = {i: selection_score(salt, spec.examples[i].input) for i in training}
    chosen = {i for i in training if scores[i] < fraction}
    if not chosen:
        chosen = {min(training, key=scores.__getitem__)}
    elif len(chosen) == len(training):
        chosen.discard(max(training, key=scores.__getitem__))
    held_keys = {normalize_prompt(spec.examples[i].input) for i in held}
    for i in chosen:
        if normalize_prompt(spec.examples[i].input) in held_keys:
            raise SelectionError(f"examples.{i}.input: the twin of a held-out example; remove or reword one")
    return Carved(held, tuple(sorted(chosen)), tuple(i for i in training if i not in chosen))


def trial_spec(loaded: LoadedSpec, carved: Carved) -> LoadedSpec:
    """The spec a trial runs: the training examples only, the selection rows as its evaluated side."""
    keep = sorted(carved.selection + carved.train)
    spec = loaded.spec.model_copy(update={"examples": [loaded.spec.examples[i] for i in keep]})
    salt = split_salt(loaded.spec)
    prompts = [example.input for example in spec.examples]
    picked = {loaded.spec.examples[i].input for i in carved.selection}
    recorded = RecordedSplit.of(salt, prompts, [p in picked for p in prompts])
    recorded = RecordedSplit(SELECTION_RULE, recorded.salt, recorded.held_out, recorded.train)
    return replace(loaded, spec=spec, compiled=compile_spec(spec, recorded))
