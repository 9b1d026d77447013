"""Which examples a spec holds out for evaluation: one decision per example, and the prompt normalization
every leak check shares.

The rule (`SPLIT_RULE`, docs/evaluation.md "The held-out split"): an example is held out when
sha256(salt, NUL, `rule_text(prompt)`), read as a number in [0, 1), is below `HELD_OUT_FRACTION`. Nothing
else counts, so editing the instruction, the answers or other examples never moves an example, and adding
examples never moves the existing ones. The salt is `evaluation.split_salt` when the spec sets it, else the
spec's `name` (so two specs with the same prompts split differently); renaming a spec therefore draws a new
split unless `split_salt` keeps the old name. When the rule would leave one side empty (two or more
examples), the example with the lowest score is held out (or the one with the highest is trained on).

A run records its split (`RecordedSplit`: the rule, the salt and the digests of the held-out and trained
prompts) in run.json; resuming it keeps each recorded example on its side, and only new examples are
decided by the rule.

Every place that compares a prompt with the held-out prompts (twin examples, an engine's extra chat datasets
and prebuilt files, the general-regression set, the synthesized inputs, `tt runs compare`, the recorded
split) uses the one key `normalize_prompt` (tt_stagekit.sameness: NFKC, invisible characters removed,
confusables mapped, case folded, whitespace collapsed, trailing punctuation dropped) and `prompt_digest`
from here, and `overlapping_example` (a row's user turns against the examples' prompts; tt_stagekit.chatrows,
so engine code checks with the same functions).

`rule_text` is not that key: it is the text the rule hashes, frozen as the rule was written (NFKC, whitespace
collapsed, lower-cased), so every spec keeps the split it had when the key grew stricter. Two examples
the key calls one are refused before the split (tt_host.spec.compiler.find_duplicate), so no pair of
twins can be drawn onto both sides.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

from tt_stagekit.chatrows import example_keys, normalize_prompt, overlapping_example

__all__ = ["HELD_OUT_FRACTION", "SPLIT_RULE", "RecordedSplit", "example_keys", "held_out_score", "is_held_out",
           "normalize_prompt", "overlapping_example", "prompt_digest", "rule_text", "split_examples", "split_salt"]

SPLIT_RULE = "per-example-sha256-v1"
HELD_OUT_FRACTION = 0.2


def rule_text(text: str) -> str:
    """The text `SPLIT_RULE` (and `LEGACY_RULE`) hash for a prompt, frozen: NFKC, whitespace collapsed, trimmed,
    lower-cased. Deciding sameness is `normalize_prompt`'s job, never this."""
    return re.sub(r"\s+", " ", unicodedata.normalize("NFKC", text)).strip().lower()


def _rule_digest(text: str) -> str:
    """A prompt's digest as runs recorded it before the one key (`prompt_digest`) grew stricter."""
    return hashlib.sha256(rule_text(text).encode("utf-8")).hexdigest()


def prompt_digest(text: str) -> str:
    """sha256 of the normalized prompt: how runs record and compare prompts without storing them twice."""
    return hashlib.sha256(normalize_prompt(text).encode("utf-8")).hexdigest()


def split_salt(spec: Any) -> str:
    """The spec's salt: `evaluation.split_salt` when set, else its `name`."""
    evaluation = getattr(spec, "evaluation", None)
    salt = getattr(evaluation, "split_salt", None) if evaluation is not None else None
    return salt if salt is not None else spec.name


def held_out_score(salt: str, prompt: str) -> float:
    """The example's place in [0, 1): the first 64 bits of sha256(salt NUL rule_text(prompt))."""
    digest = hashlib.sha256(f"{salt}\0{rule_text(prompt)}".encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0 ** 64


def is_held_out(salt: str, prompt: str) -> bool:
    """The rule alone, for one prompt (before the at-least-one-on-each-side correction of `split_examples`)."""
    return held_out_score(salt, prompt) < HELD_OUT_FRACTION


@dataclass(frozen=True)
class RecordedSplit:
    """A run's split as run.json keeps it (`split`): rule, salt, and the prompt digests of each side."""

    rule: str
    salt: str
    held_out: tuple[str, ...]
    train: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule, "salt": self.salt, "held_out": list(self.held_out), "train": list(self.train)}

    @classmethod
    def from_json(cls, data: Any) -> Optional["RecordedSplit"]:
        """The recorded split, or None for a run made before splits were recorded (or a malformed entry)."""
        if not isinstance(data, Mapping) or not isinstance(data.get("salt"), str):
            return None
        held, train = data.get("held_out"), data.get("train")
        if not isinstance(held, list) or not isinstance(train, list):
            return None
        return cls(str(data.get("rule")), data["salt"], tuple(map(str, held)), tuple(map(str, train)))

    @classmethod
    def of(cls, salt: str, prompts: Sequence[str], held: Sequence[bool]) -> "RecordedSplit":
        digests = [prompt_digest(p) for p in prompts]
        return cls(SPLIT_RULE, salt, tuple(d for d, h in zip(digests, held) if h),
                   tuple(d for d, h in zip(digests, held) if not h))


def split_examples(prompts: Sequence[str], salt: str, recorded: Optional[RecordedSplit] = None) -> list[bool]:
    """For each prompt, whether it is held out (True) or trained on.

    With `recorded` (a resumed run), a prompt the run recorded stays on its recorded side and the recorded
    salt decides new prompts. With two or more prompts neither side is left empty (a single prompt is trained on): the correction moves
    only prompts the run has not recorded, when there are any."""
    if len(prompts) < 2:
        return [False] * len(prompts)  # one example trains; nothing is evaluated
    if recorded is not None:
        salt = recorded.salt
    held_set, train_set = (set(recorded.held_out), set(recorded.train)) if recorded else (set(), set())
    scores = [held_out_score(salt, p) for p in prompts]
    # a prompt is found in the record by its digest, or by the digest a run recorded before the key changed
    digests = [next((d for d in (prompt_digest(p), _rule_digest(p)) if d in held_set or d in train_set),
                    prompt_digest(p)) for p in prompts]
    held = [d in held_set if d in held_set or d in train_set else s < HELD_OUT_FRACTION
            for d, s in zip(digests, scores)]
    if all(held) or not any(held):
        free = [i for i, d in enumerate(digests) if d not in held_set and d not in train_set] or range(len(prompts))
        if not any(held):
            held[min(free, key=lambda i: scores[i])] = True
        else:
            held[max(free, key=lambda i: scores[i])] = False
    return held



LEGACY_RULE = "spec-content-sha256-v0"


def legacy_split(spec_json: Mapping[str, Any]) -> RecordedSplit:
    """The split a run made before per-example splits used (rule `LEGACY_RULE`): examples ranked by a hash of
    the whole spec's instruction and examples, the lowest ~20% held out. Rebuilt from the run's spec.json so a
    run made then, resumed now, keeps the split it started with."""
    from tt_stagekit.chatrows import compile_system_message

    examples = [(str(e.get("input", "")), str(e.get("output", ""))) for e in spec_json.get("examples") or []]
    message = compile_system_message(spec_json.get("system_prompt") or "", spec_json.get("guidelines") or [],
                                     spec_json.get("constraints") or [])
    payload = {"system_message": message, "examples": sorted([rule_text(i), o] for i, o in examples)}
    key = hashlib.sha256(json.dumps(payload, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()
    n = len(examples)
    count = 0 if n < 2 else min(n - 1, max(1, round(n * HELD_OUT_FRACTION)))
    ranked = sorted(range(n), key=lambda i: hashlib.sha256(
        (key + "\0" + rule_text(examples[i][0])).encode("utf-8")).hexdigest())
    held = set(ranked[:count])
    prompts = [i for i, _ in examples]
    split = RecordedSplit.of(split_salt_of_json(spec_json), prompts, [i in held for i in range(n)])
    return RecordedSplit(LEGACY_RULE, split.salt, split.held_out, split.train)


def split_salt_of_json(spec_json: Mapping[str, Any]) -> str:
    """`split_salt` for a spec as spec.json holds it (its new examples are decided by the per-example rule)."""
    salt = (spec_json.get("evaluation") or {}).get("split_salt")
    return salt if isinstance(salt, str) else str(spec_json.get("name", ""))
