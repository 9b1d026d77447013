"""The adapter spec's optional `preference` block (pydantic + tt_host only, never torch): DPO, SimPO or KTO
on the LoRA after SFT. Its mirror for the stages is runtime/config.py's `PreferenceSettings` (a test keeps
the two equal); the stages it adds are formats/tuning.py's.
"""

from __future__ import annotations

from typing import ClassVar, Literal, Optional, Union

from pydantic import ConfigDict, Field, ValidationInfo, field_validator

from tt_host.api import StrictModel, resolve_path

DERIVED = "derived"


class Preference(StrictModel):
    """Preference tuning of the SFT adapter (docs/adapter.md "Preference tuning")."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    spec_path: ClassVar[str] = "preference"

    loss: Literal["dpo", "simpo", "kto"] = Field("dpo", description="dpo (TRL DPOTrainer loss_type sigmoid), simpo "
                                                 "(TRL CPOTrainer loss_type simpo) or kto (TRL KTOTrainer).")
    beta: float = Field(0.1, gt=0, le=100, description="The loss's temperature (TRL's beta).")
    simpo_gamma: float = Field(0.5, ge=0, le=100, description="SimPO's target reward margin (TRL's simpo_gamma).")
    pairs: Union[Literal["derived"], str] = Field(
        DERIVED, description='"derived": sample the SFT adapter on the training prompts and grade the samples; or a '
                             "JSONL file of {prompt, chosen, rejected} beside the spec.")
    reference: Literal["sft", "base"] = Field(
        "sft", description='The reference model: "sft", the SFT adapter as trained (TRL\'s frozen "ref" copy when the '
                           'policy is a pretrained adapter), or "base", the base model with the adapter disabled.')
    samples_per_prompt: int = Field(4, ge=2, le=64, description="Samples per training prompt for derived pairs.")
    temperature: float = Field(1.0, gt=0, le=10, description="Sampling temperature for derived pairs.")
    max_new_tokens: Optional[int] = Field(None, ge=1, le=32768,
                                          description="Sample length for derived pairs (default: hyperparameters.max_new_tokens).")
    sft_weight: float = Field(0.0, ge=0, le=100, description="Weight of the chosen answers' NLL added to the loss "
                                                             "(TRL: loss_type [..., \"sft\"] with loss_weights).")
    learning_rate: float = Field(5e-5, gt=0, le=1)
    n_epochs: int = Field(1, ge=1, le=1000, description="Passes over the pairs.")
    max_steps: Optional[int] = Field(None, ge=1, description="Stop after this many optimizer steps.")
    batch_size: int = Field(4, ge=1, le=4096, description="Pairs per optimizer step.")

    @field_validator("pairs")
    @classmethod
    def _pairs(cls, value: str, info: ValidationInfo) -> str:
        """A file is read and checked here (file:line); its leak check against the examples is AdapterSpec's."""
        if value == DERIVED:
            return value
        path = resolve_path(value, info)
        if path is None or not path.is_file():
            raise ValueError(f"{path or value}: file not found (give \"derived\" or a JSONL file of pairs)")
        from tt_engine_adapter.formats import pairs, rows

        try:
            pairs.read_pairs(path)
        except rows.RowError as exc:
            raise ValueError(str(exc)) from None
        return str(path)

    def fingerprint_inputs(self) -> dict:
        """What the reference stage's pairs and reference log-probs depend on: not the loss, beta, its weights or
        the optimizer (a rerun that changes only those reuses the reference stage)."""
        from tt_engine_adapter.formats import fingerprint

        pairs = {"derived": {"samples_per_prompt": self.samples_per_prompt, "temperature": self.temperature,
                             "max_new_tokens": self.max_new_tokens}} if self.pairs == DERIVED else \
            {"file": self.pairs, "sha256": fingerprint.sha256_file(self.pairs)}
        return {"pairs": pairs, "reference": self.reference}

