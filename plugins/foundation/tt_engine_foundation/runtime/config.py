"""The foundation's typed stage config: the request parsed once, at stage start, into frozen dataclasses.

Runs in the engine environment. `FoundationSettings` (the spec's `foundation` block) and
`FoundationSpecFields` (the parts of the spec the stages read) are formats/settings.py's, where each
setting is declared once and from which the host's spec model is derived (spec.py's `FoundationConfig`,
`FoundationSpec`); they are re-exported here. The host's spec model owns bounds and cross-field rules,
these classes carry the validated values across the process boundary with their types. A wrong type is
refused naming the field (`request.spec.foundation.batch_size: expected an integer, got '8' (string)`,
exit 2). The learning-rate rules (`peak_learning_rate`, `finetune_peak_rate`, `pretrain_learning_rate`)
read the settings; `Layout` says where a run's files live. Stdlib only (the learning-rate rules import the
model lazily).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional

from tt_engine_foundation.formats.settings import FoundationSettings, FoundationSpecFields  # noqa: F401
from tt_stagekit.stageconfig import StageRequest, parse_request


FINETUNE_SHARE = 0.5  # SFT's default peak as a share of the AdamW width rule (runtime.model.derived_learning_rate)


def peak_learning_rate(cfg: FoundationSettings) -> float:
    """AdamW pretraining's peak (`optimizer: adamw`): `learning_rate`, else derived from `depth`'s width."""
    if cfg.learning_rate is not None:
        return cfg.learning_rate
    from tt_engine_foundation.runtime.model import derived_learning_rate

    return derived_learning_rate(cfg.depth)


def finetune_peak_rate(cfg: FoundationSettings, width: int) -> float:
    """SFT's peak AdamW rate: `finetune_learning_rate`, else half the width rule, 1e-3 * sqrt(768 / width)
    (`width`: the model SFT starts from, which may come from `init_model`). RL runs at RL_LR_SCALE of it."""
    if cfg.finetune_learning_rate is not None:
        return cfg.finetune_learning_rate
    from tt_engine_foundation.runtime.model import ASPECT_RATIO, derived_learning_rate

    return FINETUNE_SHARE * derived_learning_rate(width // ASPECT_RATIO)


def pretrain_learning_rate(cfg: FoundationSettings) -> float:
    """Pretraining's peak: `learning_rate`, else AdamW's width rule (`optimizer: adamw`) or Muon's matrix
    rate from the tokens per step (runtime.hyperparams)."""
    if cfg.optimizer == "adamw" or cfg.learning_rate is not None:
        return peak_learning_rate(cfg)
    from tt_engine_foundation.runtime.hyperparams import muon_rates
    from tt_engine_foundation.runtime.model import ASPECT_RATIO

    return muon_rates(cfg.depth * ASPECT_RATIO, cfg.depth, cfg.vocab_size, cfg.tokens_per_step).matrix_lr


@dataclass(frozen=True)
class Layout:
    """Where a run's files live. With `init_model` (SFT/RL from an existing foundation model) the
    tokenizer and the base model are that model folder's, and nothing is pretrained in the run."""

    run_dir: Path
    init_model: Optional[Path] = None

    @property
    def tokenizer_dir(self) -> Path:
        return self.run_dir / "tokenizer"

    @property
    def tokenizer_json(self) -> Path:
        if self.init_model is not None:
            return self.init_model / "tokenizer.json"
        return self.tokenizer_dir / "tokenizer.json"

    @property
    def base_model(self) -> Path:
        """The model SFT starts from: this run's pretrained model, or `init_model`."""
        return self.init_model if self.init_model is not None else self.model_dir("pretrain")

    @property
    def recovery(self) -> Path:
        return self.run_dir / "pretrain" / "recovery"

    @property
    def tokens_bin(self) -> Path:
        return self.recovery / "pretrain-tokens.bin"

    @property
    def tokens_packing(self) -> Path:
        return self.recovery / "pretrain-tokens.packing.bin"

    @property
    def tokens_manifest(self) -> Path:
        return self.recovery / "pretrain-tokens.manifest.json"

    @property
    def checkpoints(self) -> Path:
        return self.recovery / "checkpoints"

    @property
    def heartbeats(self) -> Path:
        return self.recovery / "training-metrics.jsonl"

    @property
    def sft_checkpoints(self) -> Path:
        return self.run_dir / "sft" / "recovery" / "checkpoints"

    def model_dir(self, stage: str) -> Path:
        return self.run_dir / stage / "model"

    def has_pretrain_checkpoints(self) -> bool:
        from tt_engine_foundation.runtime.checkpoints import list_steps

        return bool(list_steps(self.checkpoints))


@dataclass(frozen=True)
class FoundationRequest(StageRequest):
    """A stage request of the foundation engine."""

    spec: FoundationSpecFields

    @property
    def cfg(self) -> FoundationSettings:
        return self.spec.foundation

    @property
    def layout(self) -> Layout:
        return Layout(self.run_dir, self.cfg.init_model)

    @property
    def device_choice(self) -> str:
        """The `--device` option, else the spec's `foundation.device` (`auto` picks the best present)."""
        return self.device if self.device != "auto" else self.cfg.device

    @property
    def answers(self) -> list[str]:
        """Every answer the run trains on: the examples' outputs and the training rows' assistant turns."""
        found = [e.output for e in self.spec.examples]
        return found + [m["content"] for r in self.train_rows for m in r["messages"][-1:] if m["role"] == "assistant"]


def parse(request: Mapping[str, Any]) -> FoundationRequest:
    return parse_request(FoundationRequest, request)
