"""The tokenizer fields of a GGUF file (llama.cpp's "gpt2" byte-level BPE), and the tokenizer they make again.

`from_tokenizer_json` reads a Hugging Face tokenizer.json: tokens by id (padded with unused tokens up to the
model's vocabulary), merges as "a b" strings, token types (special added tokens are CONTROL, other added ones
USER_DEFINED, the rest NORMAL) and the pre-tokenizer name. `rebuilt_tokenizer` makes a `tokenizers` tokenizer
from those fields as read back from a GGUF file, splitting text with the regex llama.cpp uses for that name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

from tt_stagekit.gguf import pretok

# llama.cpp's token types (gguf.TokenType), kept here as numbers so this module needs no gguf to import
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


class VocabError(ValueError):
    """The tokenizer cannot be written as a llama.cpp byte-level BPE vocabulary."""


@dataclass
class Vocab:
    tokens: list[str]
    token_types: list[int]
    merges: list[str]
    pre: str
    source_split: Optional[str]
    specials: dict[str, int] = field(default_factory=dict)  # content -> id of every special added token


def _merge_text(merge: Any) -> str:
    if isinstance(merge, str):
        return merge
    if isinstance(merge, Sequence) and len(merge) == 2:
        return f"{merge[0]} {merge[1]}"
    raise VocabError(f"tokenizer.json: a merge is neither 'a b' nor [a, b]: {merge!r}")


def from_tokenizer_json(data: Mapping[str, Any], vocab_size: int, pre: Optional[str] = None) -> Vocab:
    """The GGUF vocabulary of a byte-level BPE tokenizer.json; `pre` overrides the detected pre-tokenizer."""
    model = data.get("model") or {}
    if model.get("type") != "BPE":
        raise VocabError(f"tokenizer.json: model type {model.get('type')!r}; tt writes byte-level BPE tokenizers "
                         "only (SentencePiece-style tokenizers are not supported yet)")
    if (data.get("decoder") or {}).get("type") != "ByteLevel":
        raise VocabError("tokenizer.json: the decoder is not ByteLevel; tt writes byte-level BPE tokenizers only")
    split = pretok.split_regex(data.get("pre_tokenizer"))
    if split is None:
        raise VocabError("tokenizer.json: the pre-tokenizer is not one regex split followed by ByteLevel")
    by_id: dict[int, str] = {int(i): t for t, i in (model.get("vocab") or {}).items()}
    types: dict[int, int] = {}
    specials: dict[str, int] = {}
    for added in data.get("added_tokens") or []:
        index = int(added["id"])
        by_id[index] = added["content"]
        types[index] = CONTROL if added.get("special") else USER_DEFINED
        if added.get("special"):
            specials[added["content"]] = index
    size = max(vocab_size, max(by_id) + 1 if by_id else 0)
    tokens, token_types = [], []
    for index in range(size):
        if index in by_id:
            tokens.append(by_id[index])
            token_types.append(types.get(index, NORMAL))
        else:
            tokens.append(f"[PAD{index}]")
            token_types.append(UNUSED)
    merges = [_merge_text(m) for m in model.get("merges") or []]
    return Vocab(tokens, token_types, merges, pre or pretok.known_name(split) or "", split, specials)


def rebuilt_tokenizer(tokens: Sequence[str], token_types: Sequence[int], merges: Sequence[str], pre: str):
    """A `tokenizers.Tokenizer` made from GGUF vocabulary fields, splitting text as llama.cpp does for `pre`."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

    if pre not in pretok.PRE_TOKENIZERS:
        raise VocabError(f"tokenizer.ggml.pre {pre!r} is not one tt knows ({', '.join(pretok.PRE_TOKENIZERS)})")
    plain = {t: i for i, t in enumerate(tokens)}  # added tokens keep these ids when added below
    pairs = [tuple(m.split(" ", 1)) for m in merges]
    tok = Tokenizer(models.BPE(vocab=plain, merges=pairs, fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pretok.PRE_TOKENIZERS[pre]), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    added = [AddedToken(t, special=(kind == CONTROL), normalized=False)
             for t, kind in zip(tokens, token_types) if kind in (CONTROL, USER_DEFINED)]
    tok.add_special_tokens([a for a in added if a.special])
    tok.add_tokens([a for a in added if not a.special])
    for index, (text, kind) in enumerate(zip(tokens, token_types)):
        if kind in (CONTROL, USER_DEFINED) and tok.token_to_id(text) != index:
            raise VocabError(f"token {text!r} would get id {tok.token_to_id(text)} instead of {index}")
    return tok
