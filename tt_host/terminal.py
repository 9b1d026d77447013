"""What reaches a terminal: text with no control characters that act there.

A string tt prints may come from anyone (a shared spec, a shipped run.json, a teacher's error body, a dataset
row), and a terminal acts on some characters instead of showing them: C0 controls (ESC starts a sequence that
recolours, retitles or rewrites the screen; CR overwrites the line), DEL, C1 controls (U+009B is a one-byte
CSI on many terminals) and the bidi controls (U+202E RIGHT-TO-LEFT OVERRIDE makes `exe.txt` read `txt.exe`).
`UNSAFE` is tt's one control-character rule: `clean` removes them (tab and newline stay), and the report's
one-line cells and verdict (tt_host.reports.verdict.clean) drop the same characters. `TerminalConsole`, the
rich Console every tt command prints through, cleans every piece of text it renders (rich's own colour and
cursor sequences are made after, from styles, so they stay); `json_text` writes them in a JSON document as
`\\uXXXX` escapes, so `--json` output parses to the same strings and shows none raw.
"""

from __future__ import annotations

import re
from typing import Iterable

from rich.console import Console
from rich.segment import Segment

# C0 but tab and newline, DEL, C1, and the bidi controls (ALM, LRM, RLM, LRE..RLO, LRI..PDI).
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def clean(text: str) -> str:
    """`text` without the characters a terminal would act on (tab and newline kept)."""
    return UNSAFE.sub("", text)


def json_text(document: str) -> str:
    """A JSON document (json.dumps with ensure_ascii=False) with every unsafe character written as `\\uXXXX`:
    those characters can only stand inside its strings, so it parses to the same value."""
    return UNSAFE.sub(lambda match: f"\\u{ord(match.group()):04x}", document)


class TerminalConsole(Console):
    """A rich Console whose rendered text is `clean`ed: whatever a command prints, nothing acts on the terminal."""

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        return super()._render_buffer(segment if segment.control else Segment(clean(segment.text), segment.style)
                                      for segment in buffer)
