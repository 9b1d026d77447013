"""Which prompts admitted together share one prefill pass (engine environment; pure Python).

A prefill pass left-pads its prompts to the longest; prompts of very different
lengths go in separate passes, so the padding never exceeds the real tokens.
"""

from __future__ import annotations

from typing import Protocol, Sequence, TypeVar

PADDING_LIMIT = 2  # a prefill pass holds at most this many times its real tokens (rows x longest prompt)


class Prompted(Protocol):
    prompt: Sequence[int]


T = TypeVar("T", bound=Prompted)


def prefill_groups(jobs: Sequence[T]) -> list[list[T]]:
    """Jobs (anything with a `prompt` of ids) admitted together, in groups of one forward pass each: by prompt
    length, a group grows while its padded size (rows x longest prompt) stays within `PADDING_LIMIT` times its
    real tokens."""
    groups: list[list[T]] = []
    tokens = 0
    for job in sorted(jobs, key=lambda j: len(j.prompt)):
        if groups and (len(groups[-1]) + 1) * len(job.prompt) <= PADDING_LIMIT * (tokens + len(job.prompt)):
            groups[-1].append(job)
            tokens += len(job.prompt)
        else:
            groups.append([job])
            tokens = len(job.prompt)
    return groups
