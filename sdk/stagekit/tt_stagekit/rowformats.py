"""Two common dataset row formats other tools write, mapped onto chat messages. Stdlib only.

- **ShareGPT**: `{"conversations": [{"from": "human", "value": "..."}, {"from": "gpt", "value": "..."}]}`.
  Each turn's `from` names its role (`human`/`user` → user, `gpt`/`assistant`/`chatgpt`/`model` → assistant,
  `system` → system) and `value` is its content. Other `from` values (tool calls, observations) have no
  single meaning and are refused, naming the row and the mapping.
- **Alpaca**: `{"instruction": "...", "input": "...", "output": "..."}`: the user turn is the instruction,
  followed by a blank line and the input when the input is not empty; the answer is the output.

A row's `history`, `system` or `tools` key (LLaMA-Factory's extensions of both formats: earlier turns as
[instruction, answer] pairs, a system prompt of its own, tool definitions) is refused naming the row, unless it is
empty: those keys carry turns and context whose shape differs between tools, a row's own system prompt would
differ from the run's one system message, and tt trains no tool calls, so mapping any of them would guess, and
dropping them would train on a conversation the row did not hold. The refusal says how to write the row instead.

`detect` names a row's format; `to_messages` maps one (tt_stagekit.chatrows.normalize_row uses it, so the
adapter's datasets and the foundation's `sft_datasets` take both); `refusal` is the message of a reader
that takes only `messages` rows (the general-regression set): the format, and how to write it instead.
"""

from __future__ import annotations

from typing import Optional

SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
                  "chatgpt": "assistant", "model": "assistant", "system": "system"}
ALPACA_KEYS = ("instruction", "input", "output")
FORMAT_KEYS = ("conversations",) + ALPACA_KEYS
SHAREGPT_MAPPING = ("ShareGPT rows map as conversations[].from human|user → user, gpt|assistant|chatgpt|model → "
                    "assistant, system → system, and value → content")
ALPACA_MAPPING = "alpaca rows map as instruction (+ a blank line + input, when not empty) → user, output → assistant"
CARRIED = ("history", "system", "tools")  # keys that carry turns or context; refused unless empty
CARRIED_WHY = {"history": "earlier turns", "system": "a system prompt of the row's own",
               "tools": "tool definitions (tt trains no tool calls)"}


def detect(row: dict) -> Optional[str]:
    """"sharegpt", "alpaca" or None."""
    if "conversations" in row:
        return "sharegpt"
    if "instruction" in row or ("output" in row and "input" in row):
        return "alpaca"
    return None


def refusal(row: dict) -> Optional[str]:
    """For a reader of `messages` rows only: the row's format and how to write it, or None."""
    kind = detect(row)
    if kind == "sharegpt":
        return ("this is a ShareGPT row ('conversations' with 'from'/'value'); this file takes 'messages' rows: "
                + SHAREGPT_MAPPING)
    if kind == "alpaca":
        return "this is an alpaca row (instruction/input/output); this file takes 'messages' rows: " + ALPACA_MAPPING
    return None


def _text(row: dict, key: str, where: str, what: str, error: type[Exception], required: bool = True) -> str:
    value = row.get(key, None if required else "")
    if not isinstance(value, str) or (required and not value.strip()):
        need = "a non-empty string" if required else "a string"
        raise error(f"{where}: {what}: {key!r} must be {need}")
    return value


def to_messages(row: dict, where: str, error: type[Exception]) -> list[dict[str, str]]:
    """The chat messages of a ShareGPT or alpaca row (`detect` said which); a row that cannot be mapped raises
    `error` naming `where`, the format and the mapping."""
    if "messages" in row or "prompt" in row or "completion" in row:
        raise error(f"{where}: a row in one format only: 'messages', 'prompt' + 'completion', ShareGPT "
                    "'conversations' or alpaca 'instruction'/'input'/'output'")
    kind = detect(row)
    what = ("a ShareGPT row ('conversations' with 'from'/'value')" if kind == "sharegpt"
            else "an alpaca row (instruction/input/output)")
    for key in CARRIED:
        if row.get(key) not in (None, "", [], {}):
            raise error(f"{where}: {what}: {key!r} holds {CARRIED_WHY[key]}, which tt does not map (its shape "
                        "differs between tools) and never drops; write the row as 'messages' (a leading system "
                        "message, if any, must be the spec's), or remove the key")
    if kind == "sharegpt":
        turns = row["conversations"]
        if not isinstance(turns, list) or not turns:
            raise error(f"{where}: {what}: 'conversations' must be a non-empty list")
        messages = []
        for index, turn in enumerate(turns):
            if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
                raise error(f"{where}: {what}: conversations[{index}] must be an object with 'from' and a "
                            "string 'value'")
            role = SHAREGPT_ROLES.get(turn.get("from")) if isinstance(turn.get("from"), str) else None
            if role is None:
                raise error(f"{where}: {what}: conversations[{index}].from {turn.get('from')!r} has no mapping; "
                            f"{SHAREGPT_MAPPING} (write other turns as 'messages' rows)")
            messages.append({"role": role, "content": turn["value"]})
        return messages
    instruction = _text(row, "instruction", where, what, error)
    extra = _text(row, "input", where, what, error, required=False)
    output = _text(row, "output", where, what, error)
    user = f"{instruction}\n\n{extra}" if extra.strip() else instruction
    return [{"role": "user", "content": user}, {"role": "assistant", "content": output}]
