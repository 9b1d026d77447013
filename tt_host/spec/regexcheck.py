"""Refuse a `checks.regex` that could backtrack catastrophically, at validate (docs/synthesis.md).

The rule is defined once, in the SDK (tt_stagekit.graders.regexsafe), because the `regex` grader of
`evaluation.graders` applies it too; at run time every `checks.regex` match also runs under a time limit
(tt_host.synthesis.regexguard).
"""

from __future__ import annotations

from tt_stagekit.graders.regexsafe import pathological

__all__ = ["pathological"]
