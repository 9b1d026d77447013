"""The adapter's typed stage config: the request parsed once, at stage start, into frozen dataclasses.

Runs in the engine environment. The spec's blocks are formats/settings.py's dataclasses, where each
setting is declared once (type, default, bounds, help) and from which the host's spec models are
derived: `AdapterSpecFields` (spec.py's `AdapterSpec`), `AdapterSettings` (`Hyperparameters`, the
`hyperparameters` block), `PreferenceSettings` (`Preference`), `ReinforcementSettings`
(`Reinforcement`), `DatasetSplits` (`Datasets`) and `DatasetSource` (`Source`); they are re-exported
here. The host's spec model owns bounds and cross-field rules; these classes carry the validated values
across the process boundary with their types, and a wrong type is refused naming the field
(`request.spec.hyperparameters.batch_size: expected an integer, got '4' (string)`, exit 2). Stdlib only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from tt_engine_adapter.formats.settings import (AdapterSettings, AdapterSpecFields, DatasetSource,  # noqa: F401
                                                DatasetSplits, PreferenceSettings, ReinforcementSettings)
from tt_stagekit.stageconfig import StageRequest, parse_request


@dataclass(frozen=True)
class AdapterRequest(StageRequest):
    """A stage request of the adapter engine."""

    spec: AdapterSpecFields

    @property
    def hp(self) -> AdapterSettings:
        return self.spec.hyperparameters

    @property
    def prepared(self) -> Mapping[str, Any]:
        """The prepare stage's outputs (train/validation/test JSONL paths and counts)."""
        from tt_stagekit.protocol import StageError

        earlier = self.stages.get("prepare")
        if earlier is None:
            raise StageError("the prepare stage has not completed in this run")
        return earlier.result.get("outputs") or {}


def parse(request: Mapping[str, Any]) -> AdapterRequest:
    return parse_request(AdapterRequest, request)
