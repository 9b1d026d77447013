"""The foundation's typed stage config: the request parsed once, at stage start, into frozen dataclasses.

Runs in the engine environment. `FoundationSettings` is the spec's `foundation`
block with the same field names and defaults as spec.py's `FoundationConfig`, and
`FoundationSpecFields` the parts of spec.py's `FoundationSpec` the stages read
(a test in tests/ holds them equal; the names differ so that none means two classes); the
host's spec model owns bounds and cross-field rules, these classes carry the
validated values across the process boundary with their types. A wrong type is
refused naming the field (`request.spec.foundation.batch_size: expected an
integer, got '8' (string)`, exit 2). `Layout` says where a run's files live.
Stdlib only (the learning-rate rule imports the model lazily).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, Mapping, Optional

from tt_stagekit.benchmarks import Evaluation
from tt_stagekit.launcher import DistributedSettings
from tt_stagekit.stageconfig import Example, StageRequest, parse_request


FINETUNE_SHARE = 0.5  # SFT's default peak as a share of the AdamW width rule (runtime.model.derived_learning_rate)


@dataclass(frozen=True)
class FoundationSettings(DistributedSettings):
    """`spec.foundation`: every knob of the engine (docs/foundation.md); the torchrun settings from `DistributedSettings`."""

    corpus_path: Optional[Path] = None
    validation_path: Optional[Path] = None
    checkpoint_backup_dir: Optional[Path] = None
    depth: int = 4
    vocab_size: int = 8192
    tokenizer_max_chars: int = 10_000_000
    max_chars: int = 1_000_000_000
    bpb_max_chars: int = 4_000_000
    init_model: Optional[Path] = None
    pretrain_steps: int = 1000
    sequence_length: int = 512
    batch_size: int = 8
    gradient_accumulation_steps: int = 1
    learning_rate: Optional[float] = None
    finetune_learning_rate: Optional[float] = None
    weight_decay: float = 0.1
    warmup_steps: int = 20
    min_lr_ratio: float = 0.1
    optimizer: Literal["muon", "adamw"] = "muon"
    lr_schedule: Literal["warmdown", "cosine"] = "warmdown"
    packing: Literal["bos_aligned", "stream"] = "bos_aligned"
    qk_norm: bool = False
    document_start_share: float = 0.0
    warmdown_fraction: float = 0.5
    gradient_clip: float = 1.0
    bf16: bool = True
    cpu_bf16: bool = False
    checkpoint_interval_steps: int = 100
    checkpoint_interval_seconds: float = 1800.0
    keep_checkpoints: int = 3
    log_interval_steps: int = 10
    seed: int = 1337
    finetune_steps: int = 100
    finetune_corpus_rows: int = 0
    rl_steps: int = 0
    device: Literal["auto", "cpu", "cuda", "mps"] = "auto"
    compile: bool = False
    sft_datasets: tuple[Path, ...] = ()
    gradient_checkpointing: bool = False

    def peak_learning_rate(self) -> float:
        """AdamW pretraining's peak (`optimizer: adamw`): `learning_rate`, else derived from `depth`'s width."""
        if self.learning_rate is not None:
            return self.learning_rate
        from tt_engine_foundation.runtime.model import derived_learning_rate

        return derived_learning_rate(self.depth)

    def finetune_peak_rate(self, width: int) -> float:
        """SFT's peak AdamW rate: `finetune_learning_rate`, else half the width rule, 1e-3 * sqrt(768 / width)
        (`width`: the model SFT starts from, which may come from `init_model`). RL runs at RL_LR_SCALE of it."""
        if self.finetune_learning_rate is not None:
            return self.finetune_learning_rate
        from tt_engine_foundation.runtime.model import ASPECT_RATIO, derived_learning_rate

        return FINETUNE_SHARE * derived_learning_rate(width // ASPECT_RATIO)

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.gradient_accumulation_steps * self.sequence_length

    def pretrain_learning_rate(self) -> float:
        """Pretraining's peak: `learning_rate`, else AdamW's width rule (`optimizer: adamw`) or Muon's matrix
        rate from the tokens per step (runtime.hyperparams)."""
        if self.optimizer == "adamw" or self.learning_rate is not None:
            return self.peak_learning_rate()
        from tt_engine_foundation.runtime.hyperparams import muon_rates
        from tt_engine_foundation.runtime.model import ASPECT_RATIO

        return muon_rates(self.depth * ASPECT_RATIO, self.depth, self.vocab_size, self.tokens_per_step).matrix_lr


@dataclass(frozen=True)
class FoundationSpecFields:
    """The parts of the spec the foundation's stages read (the engine-neutral rest is the host's)."""

    extra_keys: ClassVar[str] = "ignore"

    foundation: FoundationSettings = field(default_factory=FoundationSettings)
    examples: tuple[Example, ...] = ()
    evaluation: Optional[Evaluation] = None


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
