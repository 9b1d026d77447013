"""Ids given by a unique prefix (`tt runs get 20261201-14`, `tt models get capitals-2026`): one rule for runs and models.

An exact id always wins; otherwise the ids that start with the prefix: one is the answer, several are refused
(exit 2) listing them, none is None (the caller says what was looked for).
"""

from __future__ import annotations

from typing import Iterable, Optional

from tt_host.errors import TTError

SHOWN = 20  # an ambiguous prefix lists at most this many matches


class AmbiguousPrefix(TTError, LookupError):
    """A prefix names several ids (exit 2)."""

    exit_code = 2


def pick(reference: str, ids: Iterable[str], noun: str) -> Optional[str]:
    """The one id of `ids` that `reference` is or begins; None when none does."""
    known = sorted(set(ids))
    if reference in known:
        return reference
    matches = [candidate for candidate in known if candidate.startswith(reference)] if reference else []
    if len(matches) == 1:
        return matches[0]
    if matches:
        more = f" and {len(matches) - SHOWN} more" if len(matches) > SHOWN else ""
        raise AmbiguousPrefix(f"{reference!r} is the start of {len(matches)} {noun} ids: "
                              f"{', '.join(matches[:SHOWN])}{more}; give more of the id")
    return None
