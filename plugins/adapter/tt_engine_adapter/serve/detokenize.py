"""Incremental detokenization: a growing answer's token ids as stable text deltas, and its stop sequences.

Decoding the whole answer again on every token costs time in its length (a
256-token answer decodes 256 times); here each token decodes a short window
instead: the ids from `prefix` (a few tokens back, so a tokenizer that treats
a word's first piece specially sees the same context) to the end, minus the
same window without the new ids. Text is taken only when the window does not
end in an incomplete UTF-8 character (U+FFFD); until then the ids wait (a
stop sequence is still looked for, as in the whole text). The
accumulated text is what one full decode gives (skip special tokens, no
clean-up of tokenization spaces), and `finish` decodes the whole answer once,
so the final text is exactly the full decode.

The answer is stripped of surrounding whitespace (as the evaluation stages
do); text that might still change (trailing whitespace, the start of a stop
sequence) is held back until it is certain. Joined deltas are exactly the
non-streamed text.
"""

from __future__ import annotations

from typing import Any


class TextTracker:
    """Turns a growing list of token ids into stable text deltas and detects stop sequences."""

    def __init__(self, tokenizer: Any, stops: list[str]):
        self.tokenizer, self.stops = tokenizer, stops
        self.ids: list[int] = []
        self.text = ""  # the decoded text of ids[:_read]
        self._prefix = self._read = 0
        self.sent = ""
        self.stopped = False

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)

    def add(self, token_id: int) -> str:
        """Add one token; return the newly certain text (possibly empty)."""
        self.ids.append(token_id)
        window = self._decode(self.ids[self._prefix:])
        before = self._decode(self.ids[self._prefix:self._read]) if self._read > self._prefix else ""
        pending = window[len(before):]
        incomplete = window.endswith("\ufffd")  # an incomplete UTF-8 character: its ids wait for the rest
        if pending and not incomplete:
            self.text += pending
            self._prefix, self._read = self._read, len(self.ids)
            pending = ""
        text = (self.text + pending).lstrip()
        cut = min((i for i in (text.find(s) for s in self.stops) if i >= 0), default=-1)
        if cut >= 0:
            self.stopped = True
            return self._send(text[:cut].rstrip())
        if incomplete:
            return ""
        safe = len(text.rstrip())
        for stop in self.stops:  # hold back a tail that could begin a stop sequence
            for k in range(min(len(stop) - 1, len(text)), 0, -1):
                if text.endswith(stop[:k]):
                    safe = min(safe, len(text) - k)
                    break
        return self._send(text[:safe].rstrip())

    def finish(self) -> str:
        """The rest of the text at the end of generation (one decode of the whole answer)."""
        if self.stopped:
            return ""
        return self._send(self._decode(self.ids).lstrip().rstrip())

    def _send(self, certain: str) -> str:
        if len(certain) <= len(self.sent) or not certain.startswith(self.sent):
            return ""
        delta, self.sent = certain[len(self.sent):], certain
        return delta
