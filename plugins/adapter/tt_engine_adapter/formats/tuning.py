"""The tuning stages after SFT: the one definition of which block adds which stages and whose adapter is final.

Stdlib and tt_stagekit only (the side's name `sft` is tt_stagekit.sides'), read by both sides: the host-side
plugin (which stages run), the train stage (it registers its adapter only when no tuning stage follows) and the
evaluate stages (`sft` evaluates the train stage's adapter, `candidate` the final one). A spec has at most one
tuning block; each block names the stages it adds after `train` + `sft`, in order, the last of which writes
`<run>/<stage>/adapter` (an Artifact of kind "adapter").

    no tuning block:  prepare, prefetch, baseline, train, candidate
    preference:       ..., train, sft, reference, preference, candidate
    reinforcement:    ..., train, sft, reinforce, candidate

Works on the host's pydantic spec and the engine's dataclass alike (attributes only).
"""

from __future__ import annotations

from typing import Any, Optional

from tt_stagekit.sides import SFT_SIDE

# block name -> the stages it adds after `sft`, in order; the last one writes the final adapter
TUNING = {
    "preference": ("reference", "preference"),
    "reinforcement": ("reinforce",),
}
SFT = SFT_SIDE  # the stage that evaluates the train stage's adapter when a tuning stage follows (its side's name)


def tuning_block(spec: Any) -> Optional[str]:
    """The name of the spec's tuning block (`preference`, `reinforcement`), or None."""
    given = [name for name in TUNING if getattr(spec, name, None) is not None]
    return given[0] if given else None


def both_given(spec: Any) -> Optional[str]:
    """The error when the spec names more than one tuning block (None when it names at most one)."""
    given = [name for name in TUNING if getattr(spec, name, None) is not None]
    if len(given) < 2:
        return None
    return (" and ".join(given) + ": a spec has at most one tuning stage after SFT; keep one of these blocks "
            "(run the other in a spec of its own)")


def tuning_stages(spec: Any) -> tuple[str, ...]:
    """The stages this spec runs after `train` and `sft` (empty without a tuning block)."""
    block = tuning_block(spec)
    return TUNING[block] if block else ()


def runs_stage(spec: Any, name: str) -> bool:
    """Whether a tuning stage (or `sft`) runs for this spec."""
    if name == SFT:
        return tuning_block(spec) is not None
    return name in tuning_stages(spec)


def final_adapter_stage(spec: Any) -> str:
    """The stage whose `adapter` output is the run's model: `train`, or the last tuning stage."""
    stages = tuning_stages(spec)
    return stages[-1] if stages else "train"
