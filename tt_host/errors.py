"""The root of the host's errors: every error tt reports to a user is a `TTError` carrying its exit code.

The CLI maps a `TTError` onto the process in one place (`tt_host.cli.common.refused`): the message on
stderr (or in the `--json` object) and `exit_code` as the status. Exit codes follow the command line's
rule (docs/host.md): 1 a run or check failed, 2 invalid input or usage, 130 interrupted. A subclass sets
its default code; a raise site may pass another. `did_you_mean` picks the closest of the names a mistyped one
could have meant (a spec field, a model id).
"""

from __future__ import annotations

from typing import Iterable, Optional


class TTError(Exception):
    """An error with a message for the user (what failed and the next thing to try) and an exit code."""

    exit_code: int = 1

    def __init__(self, message: str = "", exit_code: Optional[int] = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class EnvBuildError(TTError):
    """An engine environment could not be built or uv could not be run (tt_host.engines.envs, .uv)."""


class CorruptRecord(TTError, ValueError):
    """A record tt wrote (a registry entry, an activation history line, run.json) that no longer reads as one:
    the message names the file (and line), what is wrong with it and what to do (exit 1)."""

    def __init__(self, file: object, problem: str, remedy: str) -> None:
        self.file, self.problem, self.remedy = str(file), problem, remedy
        super().__init__(f"{file}: {problem}; {remedy}")


def did_you_mean(word: str, choices: Iterable[str]) -> Optional[str]:
    """The one choice closest to a mistyped `word` (difflib, similarity 0.6 or more), else None."""
    import difflib

    close = difflib.get_close_matches(word, sorted(set(choices)), n=1, cutoff=0.6)
    return close[0] if close else None
