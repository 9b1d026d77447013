"""Base, SFT and final side by side, and whether the tuning stage after SFT made the held-out score worse.

An engine with a tuning stage after SFT (preference tuning, reinforcement) evaluates the SFT model as the
held-out side `sft` (report.json `held_out_sides`) beside `baseline` and `candidate` (the final model; the sides
are tt_stagekit.sides'). The held-out score compared is the graders' mean score (`PREFIX.grader_score`) when
both sides were scored with graders, else exact match. When the final score is below the SFT one, report.json's
`tuning` section says so (`worse_than_sft`, `message`), report.md says it in its first lines, and
`tt models activate` refuses the model without --force (tt_host.models.activation.gate_of), as a failed gate.
"""

from __future__ import annotations

from typing import Any, Optional

from tt_stagekit.sides import BASELINE_SIDE, CANDIDATE_SIDE, SFT_SIDE

SCORES = ("grader_score", "exact_match")  # the held-out score compared, the first both sides have


def _value(metrics: dict[str, Any], prefix: str, key: str) -> Optional[float]:
    value = metrics.get(f"{prefix}.{key}")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def tuning_section(report: dict[str, Any]) -> Optional[dict[str, Any]]:
    """report.json's `tuning` section, or None when the run has no SFT side and final side to compare."""
    sides = report.get("held_out_sides") or {}
    if SFT_SIDE not in sides or CANDIDATE_SIDE not in sides:
        return None
    metrics = report.get("metrics") or {}
    for key in SCORES:
        sft, final = _value(metrics, sides[SFT_SIDE], key), _value(metrics, sides[CANDIDATE_SIDE], key)
        if sft is not None and final is not None:
            break
    else:
        return None
    section = {"metric": key, "base": _value(metrics, sides.get(BASELINE_SIDE, BASELINE_SIDE), key), "sft": sft,
               "final": final, "worse_than_sft": final < sft}
    if final < sft:
        what = key.replace("_", " ")
        section["message"] = (f"the final model is WORSE than SFT on the held-out set: {what} {final:.4f} after the "
                              f"tuning stage against {sft:.4f} after SFT; `tt models activate` refuses it without "
                              "--force (the run keeps the SFT model too)")
    return section
