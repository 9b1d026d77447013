"""The llama.cpp pre-tokenizers tt writes into `tokenizer.ggml.pre`, and which one a tokenizer.json uses.

llama.cpp splits text before BPE with a fixed regex per pre-tokenizer name (src/llama-vocab.cpp); a GGUF
whose tokenizer was trained with another split tokenizes differently there. Each entry here is the split a
Hugging Face tokenizer.json writes for that name (`tokenizers` syntax); `vocab.rebuilt_tokenizer` uses it to
tokenize as llama.cpp will, and the probe check (tt_stagekit.gguf.probe) compares that with the source.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

GPT2_SPLIT = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

# name in tokenizer.ggml.pre -> the split regex (Split(..., behavior="isolated") before ByteLevel(use_regex=False))
PRE_TOKENIZERS: dict[str, str] = {
    # Qwen2/Qwen3 (and tt's foundation tokenizer): digits one at a time
    "qwen2": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
    # Llama 3: numbers in groups of up to three digits
    "llama-bpe": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
    # GPT-2's ByteLevel(use_regex=True) split
    "gpt-2": GPT2_SPLIT,
}


def split_regex(pre_tokenizer: Optional[Mapping[str, Any]]) -> Optional[str]:
    """The one split regex of a byte-level tokenizer.json `pre_tokenizer` (None when it has another shape)."""
    if not isinstance(pre_tokenizer, Mapping):
        return None
    kind = pre_tokenizer.get("type")
    if kind == "ByteLevel":
        return GPT2_SPLIT if pre_tokenizer.get("use_regex", True) else None
    if kind != "Sequence":
        return None
    parts = list(pre_tokenizer.get("pretokenizers") or [])
    if len(parts) != 2 or parts[1].get("type") != "ByteLevel" or parts[1].get("use_regex", True):
        return None
    split = parts[0]
    pattern = split.get("pattern") or {}
    if split.get("type") != "Split" or split.get("behavior") != "Isolated" or split.get("invert") or "Regex" not in pattern:
        return None
    return str(pattern["Regex"])


def known_name(regex: Optional[str]) -> Optional[str]:
    """The llama.cpp pre-tokenizer name of exactly this split (None: llama.cpp has none that tt knows)."""
    for name, known in PRE_TOKENIZERS.items():
        if regex == known:
            return name
    return None
