"""When two prompts are the same prompt: one key, compared by the host and every engine. Stdlib only.

`normalize_prompt(text)` is the form in which two prompts count as one (docs/evaluation.md "The same
prompt"). Two examples with one key are twins, refused at `tt validate`; a training row, a synthesized input
or a general-set row with an example's key is a leak; `tt runs compare` matches runs' prompts by it. In order:

1. Unicode NFKC (fullwidth, ligatures, mathematical letters become their plain letters);
2. invisible characters removed: every format character (category Cf: U+200B ZERO WIDTH SPACE, U+2060 WORD
   JOINER, U+FEFF, the bidi marks and overrides, ...) and the other default-ignorable marks a reader cannot
   see (U+034F, the variation selectors);
3. confusable letters mapped to the Latin letter they look like (`CONFUSABLES`), so a Cyrillic `а` in
   `Whаt` is the Latin `a`, then NFKC again;
4. case folded (`str.casefold`), runs of whitespace collapsed to one space, the ends trimmed;
5. trailing punctuation (Unicode category P*) dropped, so `What is 2+2?` and `what is 2+2` are one prompt;
   a prompt that is nothing but punctuation keeps it.

`CONFUSABLES` is taken from Unicode Technical Standard #39's confusables.txt (Unicode 15.1.0,
https://www.unicode.org/Public/security/15.1.0/confusables.txt): the Cyrillic and Greek letters whose
skeleton there is one Latin letter. A letter TR39 maps to a non-Latin prototype (Cyrillic `в` -> `ʙ`) is
left as it is: it does not look like a Latin letter in running text.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["CONFUSABLES", "normalize_prompt"]

_LATIN_LOOKALIKES = {
    # Cyrillic capitals
    "А": "A", "В": "B", "Е": "E", "Ѕ": "S", "І": "I", "Ј": "J", "К": "K", "М": "M", "Н": "H", "О": "O",
    "Р": "P", "С": "C", "Т": "T", "Х": "X", "Ү": "Y", "Ӏ": "l", "Ԁ": "d", "Ԛ": "Q", "Ԝ": "W",
    # Cyrillic small letters
    "а": "a", "г": "r", "е": "e", "о": "o", "р": "p", "с": "c", "у": "y", "х": "x", "ѕ": "s", "і": "i",
    "ј": "j", "һ": "h", "ӏ": "l", "ԁ": "d", "ԛ": "q", "ԝ": "w", "ѵ": "v", "ү": "y",
    # Greek capitals
    "Α": "A", "Β": "B", "Ε": "E", "Ζ": "Z", "Η": "H", "Ι": "I", "Κ": "K", "Μ": "M", "Ν": "N", "Ο": "O",
    "Ρ": "P", "Τ": "T", "Υ": "Y", "Χ": "X",
    # Greek small letters
    "α": "a", "γ": "y", "ι": "i", "ν": "v", "ο": "o", "ρ": "p", "υ": "u",
}
CONFUSABLES = str.maketrans(_LATIN_LOOKALIKES)

# Default-ignorable marks outside category Cf: combining grapheme joiner, variation selectors.
_IGNORABLE = {0x034F, *range(0xFE00, 0xFE10), *range(0xE0100, 0xE01F0)}
_SPACES = re.compile(r"\s+")


def _visible(text: str) -> str:
    return "".join(c for c in text if unicodedata.category(c) != "Cf" and ord(c) not in _IGNORABLE)


def normalize_prompt(text: str) -> str:
    """The key two prompts share when they are the same prompt (see the module's docstring)."""
    text = _visible(unicodedata.normalize("NFKC", text))
    text = unicodedata.normalize("NFKC", text.translate(CONFUSABLES)).casefold()
    text = _SPACES.sub(" ", text).strip()
    end = len(text)
    while end and (unicodedata.category(text[end - 1]).startswith("P") or text[end - 1].isspace()):
        end -= 1
    return text[:end] if end else text
