"""The adapter's settings, each declared once: name, type, default, bounds and help (both processes read this).

The stages parse a request into these frozen dataclasses (runtime/config.py, `tt_stagekit.stageconfig`); the
host derives its strict spec blocks from them (spec.py, preference_spec.py, reinforcement_spec.py, through
`tt_host.api.settings_model`) and adds the rules between settings there. One class per block of the spec:

| dataclass | spec block | host model |
|---|---|---|
| `AdapterSettings` | `hyperparameters` (the torchrun settings from `DistributedSettings`) | spec.py `Hyperparameters` |
| `DatasetSource`, `DatasetSplits` | one source, `datasets` | spec.py `Source`, `Datasets` |
| `PreferenceSettings` | `preference` | preference_spec.py `Preference` |
| `ReinforcementSettings` | `reinforcement` | reinforcement_spec.py `Reinforcement` |
| `AdapterSpecFields` | the adapter's top-level keys (`examples`, `evaluation`: the neutral spec's) | spec.py `AdapterSpec` |

The help is the spec's JSON schema description; docs/adapter.md's tables are checked against the defaults
(tests/host/engine_specs/test_settings_docs.py). Stdlib and tt_stagekit only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal, Optional, Union

from tt_stagekit.benchmarks import Evaluation
from tt_stagekit.launcher import DistributedSettings
from tt_stagekit.settings import PathString, Text, TextPath, setting
from tt_stagekit.stageconfig import Example

DERIVED = "derived"  # preference.pairs: sample the SFT adapter and grade the samples


@dataclass(frozen=True)
class AdapterSettings(DistributedSettings):
    """`spec.hyperparameters`: LoRA and training knobs (the torchrun settings from `DistributedSettings`)."""

    n_epochs: int = setting(3, ge=1, le=1000, help="Passes over the training rows.")
    max_steps: Optional[int] = setting(None, ge=1, help="Stop after this many optimizer steps (caps n_epochs).")
    learning_rate: float = setting(2e-4, gt=0, le=1)
    batch_size: int = setting(4, ge=1, le=4096, help="Rows per micro-batch.")
    gradient_accumulation_steps: int = setting(1, ge=1, le=4096)
    lora_rank: int = setting(16, ge=1, le=4096)
    lora_alpha: float = setting(32.0, gt=0, le=1e6)
    lora_dropout: float = setting(0.05, ge=0, lt=1)
    lora_target_modules: Union[Literal["all-linear"], tuple[str, ...]] = setting(
        "all-linear", help='"all-linear" (every linear layer but the output head) or module names.')
    max_seq_length: int = setting(1024, ge=8, le=1_048_576)
    max_eval_examples: Optional[int] = setting(None, ge=1, help="Evaluate at most this many held-out rows.")
    max_new_tokens: int = setting(128, ge=1, le=32768, help="Generation budget per evaluated prompt.")
    eval_batch_size: int = setting(16, ge=1, le=4096)
    warmup_ratio: float = setting(0.1, ge=0, le=1)
    lr_scheduler: Literal["cosine", "linear", "constant"] = "cosine"
    weight_decay: float = setting(0.0, ge=0, le=10)
    max_grad_norm: Optional[float] = setting(1.0, gt=0)
    precision: Literal["auto", "bf16", "fp16", "fp32"] = setting(
        "auto", help="auto: bf16 on CUDA when supported, fp16 with a gradient scaler on other CUDA GPUs, else fp32.")
    gradient_checkpointing: bool = setting(False, help="Recompute activations in the backward pass: less memory, "
                                                       "about a third more compute, same results.")
    load_in_4bit: bool = setting(False, help="QLoRA: the base model in 4-bit NF4 (bitsandbytes, double quantization, "
                                             "bf16 compute where supported); CUDA only.")
    eval_interval_steps: Optional[int] = setting(None, ge=1, help="Validation loss every N optimizer steps; the "
                                                 "adapter registered is the checkpoint with the lowest one.")
    early_stopping_patience: Optional[int] = setting(None, ge=1, help="Stop after this many evaluations in a row "
                                                     "without a lower validation loss (needs eval_interval_steps).")
    checkpoint_interval_steps: int = setting(50, ge=1)
    keep_checkpoints: int = setting(2, ge=1, le=1000)
    log_interval_steps: int = setting(1, ge=1)
    seed: int = setting(42, ge=0, le=2**32 - 1)
    train_on_turns: Literal["all", "last"] = setting(
        "all", help="Loss on every assistant turn of a multi-turn row, or on its last answer only.")
    packing: bool = setting(False, help="Lay each micro-batch's rows end to end in sequences of at most "
                                        "max_seq_length tokens (no padding between rows, attention and "
                                        "positions reset per row).")
    sharding: Literal["none", "fsdp"] = setting(
        "none", help='How training processes (nproc_per_node × nnodes > 1) hold the model: "none", each a whole '
                     'copy (DistributedDataParallel); "fsdp", each a 1/N shard of every weight, gradient and '
                     "optimizer state (FSDP2 fully_shard per decoder layer), the base built on the meta device "
                     "and each rank reading only its shard. SFT only.")
    fsdp_cpu_offload: bool = setting(False, help='With sharding "fsdp" on CUDA: keep the shards and the optimizer '
                                                 "state in host memory between uses (less GPU memory, slower).")

    @property
    def target_modules(self) -> Union[str, list[str]]:
        """`lora_target_modules` as PEFT takes it ("all-linear" or a list of names)."""
        value = self.lora_target_modules
        return value if isinstance(value, str) else list(value)


@dataclass(frozen=True)
class PreferenceSettings:
    """`spec.preference`: DPO, SimPO or KTO on the LoRA after SFT (docs/adapter.md "Preference tuning")."""

    loss: Literal["dpo", "simpo", "kto"] = setting("dpo", help="dpo (TRL DPOTrainer loss_type sigmoid), simpo "
                                                   "(TRL CPOTrainer loss_type simpo) or kto (TRL KTOTrainer).")
    beta: float = setting(0.1, gt=0, le=100, help="The loss's temperature (TRL's beta).")
    simpo_gamma: float = setting(0.5, ge=0, le=100, help="SimPO's target reward margin (TRL's simpo_gamma).")
    # "derived", or (after the host's check) the absolute path of a JSONL file of pairs
    pairs: Union[Literal["derived"], str] = setting(
        DERIVED, help='"derived": sample the SFT adapter on the training prompts and grade the samples; or a '
                      "JSONL file of {prompt, chosen, rejected} beside the spec.")
    reference: Literal["sft", "base"] = setting(
        "sft", help='The reference model: "sft", the SFT adapter as trained (TRL\'s frozen "ref" copy when the '
                    'policy is a pretrained adapter), or "base", the base model with the adapter disabled.')
    samples_per_prompt: int = setting(4, ge=2, le=64, help="Samples per training prompt for derived pairs.")
    temperature: float = setting(1.0, gt=0, le=10, help="Sampling temperature for derived pairs.")
    max_new_tokens: Optional[int] = setting(None, ge=1, le=32768, help="Sample length for derived pairs (default: "
                                                                       "hyperparameters.max_new_tokens).")
    sft_weight: float = setting(0.0, ge=0, le=100, help="Weight of the chosen answers' NLL added to the loss "
                                                        "(TRL: loss_type [..., \"sft\"] with loss_weights).")
    learning_rate: float = setting(5e-5, gt=0, le=1)
    n_epochs: int = setting(1, ge=1, le=1000, help="Passes over the pairs.")
    max_steps: Optional[int] = setting(None, ge=1, help="Stop after this many optimizer steps.")
    batch_size: int = setting(4, ge=1, le=4096, help="Pairs per optimizer step.")


@dataclass(frozen=True)
class ReinforcementSettings:
    """`spec.reinforcement`: GRPO on the LoRA after SFT (docs/adapter.md "GRPO", with the names a TRL user knows)."""

    algorithm: Literal["grpo"] = setting("grpo", help="The reinforcement algorithm (GRPO, group-relative policy "
                                                      "optimization).")
    steps: int = setting(50, ge=1, le=100_000, help="Optimizer steps; each samples fresh groups.")
    prompts_per_step: int = setting(4, ge=1, le=4096, help="Training prompts sampled per step (each gets a group of "
                                                           "group_size answers).")
    group_size: int = setting(8, ge=2, le=256, help="Answers sampled per prompt; advantages are relative to the "
                                                    "group (TRL num_generations).")
    learning_rate: float = setting(5e-5, gt=0, le=1, help="AdamW learning rate of the LoRA weights (constant).")
    kl_beta: float = setting(0.0, ge=0, le=100, help="Weight of the KL penalty to the SFT adapter (TRL beta); 0 "
                                                     "leaves it out.")
    epsilon: float = setting(0.2, gt=0, lt=1, help="Clip range of the probability ratio (TRL epsilon).")
    iterations: int = setting(1, ge=1, le=64, help="Optimizer passes over each step's samples (TRL num_iterations); "
                                                   "the clip acts from the second on.")
    loss_type: Literal["grpo", "dapo"] = setting(
        "dapo", help='"dapo": mean over all answer tokens of the step (TRL\'s default); "grpo": mean per answer, '
                     "then over answers.")
    scale_rewards: Literal["group", "none"] = setting(
        "group", help='"group": advantages divided by the group\'s reward std (GRPO); "none": not (Dr. GRPO).')
    max_new_tokens: int = setting(64, ge=1, le=32768, help="Answer budget per sample (TRL max_completion_length).")
    temperature: float = setting(1.0, gt=0, le=10, help="Sampling temperature of the rollouts (and of the "
                                                        "log-probabilities, as TRL).")
    top_p: float = setting(1.0, gt=0, le=1, help="Nucleus sampling of the rollouts.")
    rollout_batch_size: int = setting(32, ge=1, le=4096, help="Sequences decoded together by the rollout generator "
                                                              "(continuous batching).")
    probe_groups: int = setting(4, ge=1, le=1024, help="Groups sampled before the first step; when every one has "
                                                       "zero reward spread the stage refuses to start.")
    max_grad_norm: float = setting(1.0, gt=0, le=1e6, help="Gradient clipping norm.")


@dataclass(frozen=True)
class DatasetSource:
    """One dataset source: a local `path` or a `hub` dataset at a pinned `revision`, with a mixing `weight`."""

    path: Optional[TextPath] = setting(None, help="JSONL file, parquet file or datasets save_to_disk folder.")
    hub: Optional[Text] = setting(None, help="Hub dataset id org/name (fetched by the prepare stage).")
    revision: Optional[Text] = setting(None, help="Commit, branch or tag of the hub dataset (required with hub).")
    split: Text = setting("train", min_length=1, max_length=100, help="Hub dataset split whose files are read.")
    weight: float = setting(1.0, gt=0, le=1000, help="Rows repeated (2: twice) or a seeded share kept (0.5).")


@dataclass(frozen=True)
class DatasetSplits:
    """`spec.datasets`: prebuilt datasets (a path beside the spec, absolute once the host checked it) or sources;
    `train` may mix several sources with weights."""

    train: Union[PathString, DatasetSource, tuple[DatasetSource, ...], None] = None
    validation: Union[PathString, DatasetSource, None] = None
    test: Union[PathString, DatasetSource, None] = None

    def sources(self, split: str) -> tuple[DatasetSource, ...]:
        value = getattr(self, split)
        if value is None:
            return ()
        if isinstance(value, Path):
            return (DatasetSource(path=value),)
        return value if isinstance(value, tuple) else (value,)


@dataclass(frozen=True)
class AdapterSpecFields:
    """The adapter's keys of the spec, in the spec's order; `examples` and `evaluation` are the neutral spec's
    (the host's `BehaviorSpec`), which the stages read too. Other neutral keys are ignored here."""

    extra_keys: ClassVar[str] = "ignore"

    base_model: Text = setting(min_length=1, help="Local Hugging Face model folder (beside the spec) or hub id.")
    base_model_revision: Optional[Text] = setting(
        None, validate_default=True,
        help="Commit (40 hex), branch or tag of a hub id; required for a hub id. Prefetch resolves a branch or tag "
             "to its commit and every later stage uses that commit.")
    hyperparameters: AdapterSettings = setting(default_factory=AdapterSettings)
    datasets: Optional[DatasetSplits] = None
    device: Literal["auto", "cpu", "cuda", "mps"] = "auto"
    preference: Optional[PreferenceSettings] = setting(None, help="Preference tuning (DPO, SimPO, KTO) of the SFT "
                                                                  "adapter: stages reference and preference.")
    reinforcement: Optional[ReinforcementSettings] = setting(
        None, help="GRPO on the LoRA after SFT, rewarded by the spec's graders (docs/adapter.md, GRPO).")
    examples: tuple[Example, ...] = ()
    evaluation: Optional[Evaluation] = None

    @property
    def is_local(self) -> bool:
        """A local model folder (an absolute path after validation), not a hub id."""
        return Path(self.base_model).is_absolute()
