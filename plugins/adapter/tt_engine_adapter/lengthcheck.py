"""`tt validate`'s length check for the adapter engine, without loading a tokenizer (stdlib only).

The host never imports transformers, so it cannot render the chat template
or run the tokenizer. It can still prove that a spec cannot work: for a local
base model whose `tokenizer.json` splits text at whitespace before merging
(byte-level BPE with a GPT-2/GPT-4/Llama-3 style split, WordPiece/whitespace
splitting, SentencePiece with its whitespace split), every whitespace-separated
word is at least one token, so the system message's words plus the longest
answer's words plus its end-of-turn token are a lower bound on a row's length.
When that bound already exceeds `hyperparameters.max_seq_length`, validation
fails. Everything else (hub models, other tokenizers, the exact count with the
template's own tokens) is checked with the real tokenizer by the prefetch
stage, which exits 2 with the exact length (docs/adapter.md).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

from tt_stagekit.promptfit import length_message, words

FIELD = "hyperparameters.max_seq_length"


def _space_pieces(text: str) -> int:
    return sum(1 for piece in text.split(" ") if piece)


def _splitter(pre: Any) -> Optional[Callable[[str], int]]:
    """A lower-bound counter for this pre-tokenizer, or None when it may join words."""
    if not isinstance(pre, dict):
        return None
    kind = pre.get("type")
    if kind == "Sequence":
        counters = [_splitter(p) for p in pre.get("pretokenizers") or []]
        found = [c for c in counters if c is not None]
        return found[0] if found else None
    if kind == "ByteLevel" and pre.get("use_regex", True):
        return words
    if kind == "Split":
        pattern = (pre.get("pattern") or {}).get("Regex") or ""
        return words if r"\s+(?!\S)" in pattern else None  # the GPT-2/GPT-4/Llama-3 family of splits
    if kind in ("Whitespace", "WhitespaceSplit", "BertPreTokenizer"):
        return words
    if kind == "Metaspace" and pre.get("split", True):
        return _space_pieces
    return None


def counter_for(base_model: str) -> Optional[Callable[[str], int]]:
    """The lower-bound word counter for a local base model folder, or None (then prefetch checks)."""
    path = Path(base_model) / "tokenizer.json"
    if not Path(base_model).is_absolute() or not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # a broken tokenizer is the prefetch stage's to report
    return _splitter(data.get("pre_tokenizer")) if isinstance(data, dict) else None


def length_error(base_model: str, system_message: str, answers: Iterable[str], max_seq_length: int) -> Optional[str]:
    """The refusal when even the lower bound of [system, empty user, longest answer] exceeds max_seq_length."""
    count = counter_for(base_model)
    if count is None:
        return None
    needed = count(system_message) + max((count(a) for a in answers), default=0) + 1  # + end-of-turn
    if needed <= max_seq_length:
        return None
    return length_message(FIELD, needed, max_seq_length, exact=False)
