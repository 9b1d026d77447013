"""The serving scheduler, recording every token each job's row picked: for tests that compare token for token.

Engine environment (torch); in-process, no thread: tests drive `Scheduler._iteration` themselves.
"""

from __future__ import annotations

from tt_engine_adapter.serve.batching import Scheduler


class Recording(Scheduler):
    """`tokens[id(job)]`: the ids each job's row picked, in order (its stop id included).

    Every submitted job is held for the recorder's life: CPython gives a freed object's id to the next one, so a
    test that drops a finished job and submits another would otherwise read the old job's tokens before its own.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.tokens: dict[int, list[int]] = {}
        self._held: list = []

    def submit(self, job) -> None:
        self._held.append(job)
        self.tokens[id(job)] = []
        super().submit(job)

    def _take(self, rows, tokens):
        for row, token in zip(rows, tokens):
            self.tokens.setdefault(id(row.job), []).append(token)
        super()._take(rows, tokens)
