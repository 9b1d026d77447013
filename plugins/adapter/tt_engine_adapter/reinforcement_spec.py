"""The adapter spec's optional `reinforcement` block: GRPO on the LoRA after SFT (pydantic, host side, never torch).

Each setting is declared here once, with its help; runtime/config.py mirrors it as `ReinforcementSettings`
(a test holds the two equal). The names a TRL user knows are in docs/adapter.md ("GRPO").
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from tt_host.api import StrictModel


class Reinforcement(StrictModel):
    """GRPO after SFT: groups of sampled answers per training prompt, rewarded by the spec's graders."""

    spec_path: ClassVar[str] = "reinforcement"

    algorithm: Literal["grpo"] = Field("grpo", description="The reinforcement algorithm (GRPO, group-relative "
                                                           "policy optimization).")
    steps: int = Field(50, ge=1, le=100_000, description="Optimizer steps; each samples fresh groups.")
    prompts_per_step: int = Field(4, ge=1, le=4096, description="Training prompts sampled per step (each gets a "
                                                                "group of group_size answers).")
    group_size: int = Field(8, ge=2, le=256, description="Answers sampled per prompt; advantages are relative to "
                                                         "the group (TRL num_generations).")
    learning_rate: float = Field(5e-5, gt=0, le=1, description="AdamW learning rate of the LoRA weights (constant).")
    kl_beta: float = Field(0.0, ge=0, le=100, description="Weight of the KL penalty to the SFT adapter (TRL beta); "
                                                          "0 leaves it out.")
    epsilon: float = Field(0.2, gt=0, lt=1, description="Clip range of the probability ratio (TRL epsilon).")
    iterations: int = Field(1, ge=1, le=64, description="Optimizer passes over each step's samples (TRL "
                                                        "num_iterations); the clip acts from the second on.")
    loss_type: Literal["grpo", "dapo"] = Field(
        "dapo", description='"dapo": mean over all answer tokens of the step (TRL\'s default); "grpo": mean per '
                            "answer, then over answers.")
    scale_rewards: Literal["group", "none"] = Field(
        "group", description='"group": advantages divided by the group\'s reward std (GRPO); "none": not (Dr. GRPO).')
    max_new_tokens: int = Field(64, ge=1, le=32768, description="Answer budget per sample (TRL "
                                                                "max_completion_length).")
    temperature: float = Field(1.0, gt=0, le=10, description="Sampling temperature of the rollouts (and of the "
                                                             "log-probabilities, as TRL).")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling of the rollouts.")
    rollout_batch_size: int = Field(32, ge=1, le=4096, description="Sequences decoded together by the rollout "
                                                                   "generator (continuous batching).")
    probe_groups: int = Field(4, ge=1, le=1024, description="Groups sampled before the first step; when every one "
                                                            "has zero reward spread the stage refuses to start.")
    max_grad_norm: float = Field(1.0, gt=0, le=1e6, description="Gradient clipping norm.")

