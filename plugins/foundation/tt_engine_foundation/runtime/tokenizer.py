"""Byte-level BPE tokenizer (HF `tokenizers`) with the chat special tokens.

Lossless on any UTF-8 text: text is split with llama.cpp's qwen2 pattern, mapped
to the 256-symbol byte alphabet, and merged; decoding maps symbols back to
bytes. Special tokens are never produced from user text (a literal
"<|bos|>" in the corpus encodes as ordinary bytes); chat sequences insert
their ids directly. Saved as a standard `tokenizer.json`.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Iterable

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

from tt_engine_foundation.formats import pretokenizer

BOS = "<|bos|>"
PAD = "<|pad|>"
SYSTEM_START = "<|system_start|>"
SYSTEM_END = "<|system_end|>"
USER_START = "<|user_start|>"
USER_END = "<|user_end|>"
ASSISTANT_START = "<|assistant_start|>"
ASSISTANT_END = "<|assistant_end|>"
SPECIAL_TOKENS = [BOS, PAD, SYSTEM_START, SYSTEM_END, USER_START, USER_END, ASSISTANT_START, ASSISTANT_END]
MIN_VOCAB = 256 + len(SPECIAL_TOKENS)

# llama.cpp's qwen2 split (GPT-4 style, numbers one digit at a time), so a GGUF export tokenizes the same
# in llama.cpp and Ollama (formats/pretokenizer.py; docs/foundation.md says why this one).
SPLIT_PATTERN = pretokenizer.SPLIT_PATTERN


def new_tokenizer() -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    return tok


def train(texts: Iterable[str], vocab_size: int) -> Tokenizer:
    """Train on an iterator of texts; ids 0..7 are the special tokens, then the 256 bytes."""
    if vocab_size < MIN_VOCAB:
        raise ValueError(f"vocab_size must be at least {MIN_VOCAB}")
    tok = new_tokenizer()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    tok.encode_special_tokens = True
    return tok


def load(path: str | Path) -> Tokenizer:
    tok = Tokenizer.from_file(str(path))
    tok.encode_special_tokens = True
    return tok


def special_id(tok: Tokenizer, token: str) -> int:
    value = tok.token_to_id(token)
    if value is None:
        raise ValueError(f"tokenizer has no special token {token}")
    return value


def load_run_tokenizer(path: Path) -> Tokenizer:
    """The run's tokenizer (`Layout.tokenizer_json`); a missing one is a failed stage naming the file."""
    from tt_stagekit.protocol import StageError

    if not path.is_file():
        raise StageError(f"{path}: tokenizer is missing; run the tokenizer stage first")
    return load(path)


def special_ids(tok: Tokenizer) -> dict[str, int]:
    """The model config's bos/eos/pad ids."""
    return {
        "bos_token_id": special_id(tok, BOS),
        "eos_token_id": special_id(tok, ASSISTANT_END),
        "pad_token_id": special_id(tok, PAD),
    }


def encode(tok: Tokenizer, text: str) -> list[int]:
    return tok.encode(text, add_special_tokens=False).ids


def encode_batch(tok: Tokenizer, texts: list[str]) -> list[list[int]]:
    return [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]


def decode(tok: Tokenizer, ids: list[int]) -> str:
    return tok.decode(ids, skip_special_tokens=False)


@lru_cache(maxsize=1)
def _unicode_to_byte() -> dict[str, int]:
    # The GPT-2 byte <-> printable-unicode table that ByteLevel uses.
    visible = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    codes = list(visible)
    extra = 0
    for b in range(256):
        if b not in visible:
            visible.append(b)
            codes.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(visible, codes)}


def token_bytes(tok: Tokenizer) -> list[int]:
    """Raw UTF-8 byte length of every token id; special tokens count as 0 bytes."""
    table = _unicode_to_byte()
    specials = set(SPECIAL_TOKENS)
    size = tok.get_vocab_size(with_added_tokens=True)
    out = [0] * size
    for token, index in tok.get_vocab(with_added_tokens=True).items():
        if token in specials:
            continue
        out[index] = sum(1 for ch in token if ch in table) if all(ch in table for ch in token) else len(token.encode("utf-8"))
    return out


def token_raw_bytes(tok: Tokenizer, index: int) -> bytes:
    table = _unicode_to_byte()
    token = tok.id_to_token(index)
    if token is None or token in SPECIAL_TOKENS:
        return b""
    return bytes(table[ch] for ch in token)
