"""The adapter spec's optional `preference` block (pydantic + tt_host only, never torch): DPO, SimPO or KTO
on the LoRA after SFT. Its settings are declared once, in formats/settings.py's `PreferenceSettings` (what
the stages parse), from which `Preference` is derived; here are the host's checks of a pairs file. The
stages it adds are formats/tuning.py's.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import ValidationInfo, field_validator

from tt_host.api import resolve_path, settings_model

from tt_engine_adapter.formats.settings import DERIVED, PreferenceSettings


class Preference(settings_model(PreferenceSettings)):
    """Preference tuning of the SFT adapter (docs/adapter.md "Preference tuning")."""

    spec_path: ClassVar[str] = "preference"

    @field_validator("pairs")
    @classmethod
    def _pairs(cls, value: str, info: ValidationInfo) -> str:
        """The file is found here; it is read and checked once, with its leak check against the examples, by
        AdapterSpec (a large file was read and checked twice)."""
        if value == DERIVED:
            return value
        path = resolve_path(value, info)
        if path is None or not path.is_file():
            raise ValueError(f"{path or value}: file not found (give \"derived\" or a JSONL file of pairs)")
        return str(path)

    def fingerprint_inputs(self) -> dict:
        """What the reference stage's pairs and reference log-probs depend on: not the loss, beta, its weights or
        the optimizer (a rerun that changes only those reuses the reference stage)."""
        from tt_engine_adapter.formats import fingerprint

        pairs = {"derived": {"samples_per_prompt": self.samples_per_prompt, "temperature": self.temperature,
                             "max_new_tokens": self.max_new_tokens}} if self.pairs == DERIVED else \
            {"file": self.pairs, "sha256": fingerprint.sha256_file(self.pairs)}
        return {"pairs": pairs, "reference": self.reference}

