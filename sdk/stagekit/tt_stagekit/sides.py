"""The evaluating sides: which model a held-out evaluation answered for, declared once (docs/plugins.md).

A stage that evaluates held-out prompts (`Stage.evaluates`) answers for one side, and the host reads its
scores, predictions and gates by these names (report.json `held_out_sides`, `predictions`, `tuning`):

    baseline    the base model, before any tuning
    sft         the SFT model, evaluated only when a tuning stage (preference, reinforcement) follows SFT
    candidate   the final, tuned model

The host exports them to plugins through `tt_host.api`; an engine's runtime code reads them here. Stdlib only;
imports nothing (runs in the host's interpreter and in each engine's).
"""

from __future__ import annotations

BASELINE_SIDE = "baseline"
SFT_SIDE = "sft"
CANDIDATE_SIDE = "candidate"
EVALUATING_SIDES = (BASELINE_SIDE, SFT_SIDE, CANDIDATE_SIDE)  # in the order a report shows them
