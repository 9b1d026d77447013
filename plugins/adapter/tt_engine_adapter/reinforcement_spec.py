"""The adapter spec's optional `reinforcement` block: GRPO on the LoRA after SFT (pydantic, host side, never torch).

Each setting is declared once, with its help, in formats/settings.py's `ReinforcementSettings` (what the
stage parses); `Reinforcement` is derived from it. The names a TRL user knows are in docs/adapter.md ("GRPO").
"""

from __future__ import annotations

from typing import ClassVar

from tt_host.api import settings_model

from tt_engine_adapter.formats.settings import ReinforcementSettings


class Reinforcement(settings_model(ReinforcementSettings)):
    """GRPO after SFT: groups of sampled answers per training prompt, rewarded by the spec's graders."""

    spec_path: ClassVar[str] = "reinforcement"
