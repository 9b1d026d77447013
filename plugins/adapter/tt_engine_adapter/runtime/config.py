"""The adapter's typed stage config: the request parsed once, at stage start, into frozen dataclasses.

Runs in the engine environment. Each dataclass mirrors a block of the host's
spec model (spec.py) under its own name, so no name means two classes:
`AdapterSpecFields` (spec.py's `AdapterSpec`), `AdapterSettings`
(`Hyperparameters`, the `hyperparameters` block), `ReinforcementSettings`
(`Reinforcement`, the `reinforcement` block), `DatasetSplits` (`Datasets`),
`DatasetSource` (`Source`) and `PreferenceSettings` (preference_spec.py's `Preference`). Field names are the spec's key names; defaults
are the spec's defaults (a test in tests/ holds the two equal). The host's spec
model owns bounds and cross-field rules; these classes carry the validated
values across the process boundary with their types, and a wrong type is refused naming the field (`request.spec.hyperparameters.batch_size:
expected an integer, got '4' (string)`, exit 2). Stdlib only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, Mapping, Optional, Union

from tt_stagekit.benchmarks import Evaluation
from tt_stagekit.launcher import DistributedSettings
from tt_stagekit.stageconfig import Example, StageRequest, parse_request


@dataclass(frozen=True)
class AdapterSettings(DistributedSettings):
    """`spec.hyperparameters`: LoRA and training knobs (the torchrun settings from `DistributedSettings`)."""

    n_epochs: int = 3
    max_steps: Optional[int] = None
    learning_rate: float = 2e-4
    batch_size: int = 4
    gradient_accumulation_steps: int = 1
    lora_rank: int = 16
    lora_alpha: float = 32.0
    lora_dropout: float = 0.05
    lora_target_modules: Union[Literal["all-linear"], tuple[str, ...]] = "all-linear"
    max_seq_length: int = 1024
    max_eval_examples: Optional[int] = None
    max_new_tokens: int = 128
    eval_batch_size: int = 16
    warmup_ratio: float = 0.1
    lr_scheduler: Literal["cosine", "linear", "constant"] = "cosine"
    weight_decay: float = 0.0
    max_grad_norm: Optional[float] = 1.0
    precision: Literal["auto", "bf16", "fp16", "fp32"] = "auto"
    gradient_checkpointing: bool = False
    load_in_4bit: bool = False
    eval_interval_steps: Optional[int] = None
    early_stopping_patience: Optional[int] = None
    checkpoint_interval_steps: int = 50
    keep_checkpoints: int = 2
    log_interval_steps: int = 1
    seed: int = 42
    train_on_turns: Literal["all", "last"] = "all"
    packing: bool = False

    @property
    def target_modules(self) -> Union[str, list[str]]:
        """`lora_target_modules` as PEFT takes it ("all-linear" or a list of names)."""
        value = self.lora_target_modules
        return value if isinstance(value, str) else list(value)


@dataclass(frozen=True)
class PreferenceSettings:
    """`spec.preference` (preference_spec.py's `Preference`): DPO, SimPO or KTO after SFT."""

    loss: Literal["dpo", "simpo", "kto"] = "dpo"
    beta: float = 0.1
    simpo_gamma: float = 0.5
    pairs: str = "derived"  # or the absolute path of a JSONL file of pairs, checked by the host
    reference: Literal["sft", "base"] = "sft"
    samples_per_prompt: int = 4
    temperature: float = 1.0
    max_new_tokens: Optional[int] = None
    sft_weight: float = 0.0
    learning_rate: float = 5e-5
    n_epochs: int = 1
    max_steps: Optional[int] = None
    batch_size: int = 4


@dataclass(frozen=True)
class ReinforcementSettings:
    """`spec.reinforcement` (reinforcement_spec.py's `Reinforcement`): GRPO after SFT."""

    algorithm: Literal["grpo"] = "grpo"
    steps: int = 50
    prompts_per_step: int = 4
    group_size: int = 8
    learning_rate: float = 5e-5
    kl_beta: float = 0.0
    epsilon: float = 0.2
    iterations: int = 1
    loss_type: Literal["grpo", "dapo"] = "dapo"
    scale_rewards: Literal["group", "none"] = "group"
    max_new_tokens: int = 64
    temperature: float = 1.0
    top_p: float = 1.0
    rollout_batch_size: int = 32
    probe_groups: int = 4
    max_grad_norm: float = 1.0


@dataclass(frozen=True)
class DatasetSource:
    """One dataset source (spec.py's `Source`): a local path or a hub dataset at a revision, with a mixing weight."""

    path: Optional[Path] = None
    hub: Optional[str] = None
    revision: Optional[str] = None
    split: str = "train"
    weight: float = 1.0


@dataclass(frozen=True)
class DatasetSplits:
    """`spec.datasets`: prebuilt datasets (absolute paths, checked by the host) or sources."""

    train: Union[Path, DatasetSource, tuple[DatasetSource, ...], None] = None
    validation: Union[Path, DatasetSource, None] = None
    test: Union[Path, DatasetSource, None] = None

    def sources(self, split: str) -> tuple[DatasetSource, ...]:
        value = getattr(self, split)
        if value is None:
            return ()
        if isinstance(value, Path):
            return (DatasetSource(path=value),)
        return value if isinstance(value, tuple) else (value,)


@dataclass(frozen=True)
class AdapterSpecFields:
    """The parts of the spec the adapter's stages read (the engine-neutral rest is the host's)."""

    extra_keys: ClassVar[str] = "ignore"

    base_model: str
    base_model_revision: Optional[str] = None
    hyperparameters: AdapterSettings = field(default_factory=AdapterSettings)
    datasets: Optional[DatasetSplits] = None
    device: Literal["auto", "cpu", "cuda", "mps"] = "auto"
    reinforcement: Optional[ReinforcementSettings] = None
    examples: tuple[Example, ...] = ()
    evaluation: Optional[Evaluation] = None
    preference: Optional[PreferenceSettings] = None

    @property
    def is_local(self) -> bool:
        """A local model folder (an absolute path after validation), not a hub id."""
        return Path(self.base_model).is_absolute()


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
