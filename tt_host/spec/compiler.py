"""The instruction compiler: one canonical system message, chat rows and a deterministic split.

The system message is built exactly as docs/host.md (Specs) shows (the rules themselves,
`compile_system_message` and `normalize_prompt`, live once in tt_stagekit.chatrows so engines
re-check with the same code); every engine and every stage receives it from here unchanged. The train / held-out split is decided per
example by tt_host.spec.split (its normalized prompt and the spec's salt), so edits never move an example.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Optional

from tt_host.spec.schema import BehaviorSpec
from tt_host.spec.split import RecordedSplit, normalize_prompt, split_examples, split_salt
from tt_stagekit import chatrows


def compile_system_message(spec: Any) -> str:
    """The canonical system message for a spec, or anything with its `system_prompt`, `guidelines` and
    `constraints` (format: docs/host.md, Specs)."""
    return chatrows.compile_system_message(spec.system_prompt or "", spec.guidelines or [], spec.constraints or [])


def compile_validated_so_far(info: Any) -> str:
    """The system message of a spec still being validated, from the neutral fields validated so far
    (`info`: the pydantic `ValidationInfo` of an engine block's field validator, which runs after them). An
    engine checks lengths against it; a field that failed validation counts as empty (its own error is shown)."""
    data = info.data
    return chatrows.compile_system_message(data.get("system_prompt") or "", data.get("guidelines") or [],
                                           data.get("constraints") or [])


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class CompiledSpec:
    system_message: str
    system_message_sha256: str
    train_rows: list[dict]
    eval_rows: list[dict]  # full rows with the reference answer; only the host sees these
    split: RecordedSplit  # what run.json records (tt_host.spec.split)

    def eval_prompts(self) -> list[dict]:
        """Held-out rows without their answers: what an evaluating stage receives."""
        return [{"id": r["id"], "messages": r["messages"][:2]} for r in self.eval_rows]

    def references(self) -> dict[str, str]:
        return {r["id"]: r["messages"][2]["content"] for r in self.eval_rows}


class DuplicatePromptError(ValueError):
    def __init__(self, first: int, second: int):
        self.first, self.second = first, second
        super().__init__(
            f"examples {first} and {second} have the same prompt (they differ only by invisible characters, "
            "look-alike letters, case, spacing or final punctuation: docs/evaluation.md \"The same prompt\"), "
            "so one could be trained on while its twin is held out; remove or reword one"
        )


def find_duplicate(spec: BehaviorSpec) -> DuplicatePromptError | None:
    seen: dict[str, int] = {}
    for index, example in enumerate(spec.examples):
        key = normalize_prompt(example.input)
        if key in seen:
            return DuplicatePromptError(seen[key], index)
        seen[key] = index
    return None


def compile_spec(spec: BehaviorSpec, recorded: Optional[RecordedSplit] = None) -> CompiledSpec:
    """The spec's system message and rows; `recorded`: the split a resumed run started with, which it keeps."""
    error = find_duplicate(spec)
    if error is not None:
        raise error
    message = compile_system_message(spec)
    prompts = [example.input for example in spec.examples]
    flags = split_examples(prompts, split_salt(spec), recorded)
    held = {index for index, flag in enumerate(flags) if flag}
    train_rows, eval_rows = [], []
    for index, example in enumerate(spec.examples):
        row = {
            "id": f"ex-{index:05d}",
            "messages": [
                {"role": "system", "content": message},
                {"role": "user", "content": example.input},
                {"role": "assistant", "content": example.output},
            ],
        }
        (eval_rows if index in held else train_rows).append(row)
    salt = recorded.salt if recorded is not None else split_salt(spec)
    return CompiledSpec(message, sha256_text(message), train_rows, eval_rows, RecordedSplit.of(salt, prompts, flags))
