"""The probe text a GGUF export is checked on, and the check: the same token ids as the source tokenizer.

Each probe string is encoded twice, by the source tokenizer and by the tokenizer rebuilt from the written
GGUF file (as llama.cpp splits text for its pre-tokenizer): once with special-token text as plain text (how
tt encodes message text) and once with special tokens recognised (how a chat template's text is read).
"""

from __future__ import annotations

from typing import Iterable, Sequence

# digits of every length, emoji (with modifiers and joiners), CJK, runs of whitespace, contractions, accents
PROBE_TEXTS: tuple[str, ...] = (
    "7", "42", "123", "1234", "12345", "3.14159", "2026-12-01 10:30", "x = 98765 + 4321", "v1.2.3 and 1,000,000",
    "😀", "🎉👍🏽 👨‍👩‍👧", "日本語のテキスト", "中文分词测试，标点。", "한국어 문장",
    "  two spaces", "tabs\t\tand\nnewlines\n\n\n", "    indented code\n        deeper", "trailing   ",
    "\nleading newline", "a\r\nwindows line", "don't I'll we've THEY'RE", "café naïve Ångström", "mixed123abc!?",
)


def probe_texts(special_tokens: Iterable[str]) -> list[str]:
    """PROBE_TEXTS and each special token's text, alone and inside a sentence."""
    texts = list(PROBE_TEXTS)
    for token in sorted(special_tokens):
        texts += [token, f"say {token} then 12345"]
    return texts


def encode_both(tok, text: str) -> tuple[list[int], list[int]]:
    """(ids with special-token text as plain text, ids with special tokens recognised)."""
    saved = tok.encode_special_tokens
    try:
        tok.encode_special_tokens = True
        plain = tok.encode(text, add_special_tokens=False).ids
        tok.encode_special_tokens = False
        parsed = tok.encode(text, add_special_tokens=False).ids
    finally:
        tok.encode_special_tokens = saved
    return plain, parsed


def differing(source_tok, gguf_tok, texts: Sequence[str]) -> list[str]:
    """The probe strings the two tokenizers give different ids for (in either mode)."""
    return [text for text in texts if encode_both(source_tok, text) != encode_both(gguf_tok, text)]


def refusal(differ: Sequence[str], pre: str, source_split: str | None) -> str:
    """Why the export is refused, naming the strings that tokenize differently."""
    shown = ", ".join(repr(t) for t in differ[:8]) + (f" and {len(differ) - 8} more" if len(differ) > 8 else "")
    reason = f"the tokenizer splits text with {source_split!r}, which is not the split llama.cpp uses for {pre!r}"
    return (f"the GGUF tokenizer (pre-tokenizer {pre!r}) gives different token ids than the model's own for {shown}: "
            f"{reason}, so llama.cpp and Ollama would read these strings differently. Nothing was written. "
            "Models from a foundation run trained before tt used llama.cpp's qwen2 split (digits one at a time) "
            "cannot be exported to GGUF; train the tokenizer again in a new run")
