"""Known-harmless third-party output: lines an engine's libraries print that read like errors and are not.

One table, `HARMLESS`, each entry a name and a narrow pattern the WHOLE line must match. The boundary where tt reads
an engine's output (tt_host.engines.runner.run_stage, tt_host.models.serve) keeps such a line in the stage log (or
the server's log) and never shows it on the terminal; everything else is shown as before. A line that names an
error, a traceback or an exception is never noise, whatever it matches. `NoiseFilter` also drops the one line
Python's warnings module prints after a filtered warning (the `warnings.warn(` source line).
"""

from __future__ import annotations

import re

NEVER_NOISE = re.compile(r"error|traceback|exception|fatal|killed|out of memory", re.I)
HARMLESS: list[tuple[str, re.Pattern[str]]] = [
    # bitsandbytes on a CPU with AVX512-BF16 and no `kernels` package: it falls back to its own kernel
    ("bitsandbytes cpu kernel fallback", re.compile(
        r"Failed to load CPU gemm_4bit_forward from kernels-community: No module named 'kernels'\. Please make sure "
        r"you already `pip install kernels` and the kernels >= [0-9.]+")),
    # transformers 5: PEFT reads the deprecated property; the behaviour is unchanged until v6
    ("transformers is_gradient_checkpointing deprecation", re.compile(
        r"\S*transformers/modeling_utils\.py:\d+: FutureWarning: `is_gradient_checkpointing` is deprecated and will "
        r"be removed in v6\. Use `is_activation_checkpointing` instead\.")),
    # a tqdm progress bar (model loading, dataset mapping): tt shows its own progress
    ("third-party progress bar", re.compile(
        r"[\w .:/()-]{0,80}?:? *\d{1,3}%\|[^|]{0,120}\| *[0-9.]+[kMG]?/[0-9.]+[kMG]? "
        r"\[[0-9:<?, .]+(?:[a-zA-Z/]+)?\]")),
]
_WARN_SOURCE = re.compile(r"  warnings\.warn\($")


def harmless(line: str) -> str:
    """The name of the HARMLESS entry the whole line matches ("" when none does, or when it names an error)."""
    text = line.strip("\r\n")
    if not text.strip() or NEVER_NOISE.search(text):
        return ""
    for name, pattern in HARMLESS:
        if pattern.fullmatch(text.strip()):
            return name
    return ""


class NoiseFilter:
    """`is_noise(line)` for one output stream, in order (a warning's source line follows its warning)."""

    def __init__(self) -> None:
        self._after_warning = False

    def is_noise(self, line: str) -> bool:
        after, self._after_warning = self._after_warning, False
        name = harmless(line)
        if name:
            self._after_warning = "FutureWarning" in line or "UserWarning" in line
            return True
        return after and bool(_WARN_SOURCE.fullmatch(line.rstrip("\r\n")))
