"""The adapter engine's spec model: `AdapterSpec` and its blocks (pydantic + tt_host only, never torch).

A spec with `"engine": "adapter"` is validated here: the base model (a local folder beside the spec or a
pinned hub id), the LoRA and training `hyperparameters`, optional prebuilt `datasets`, and the checks that
can be proven without a tokenizer (the instruction fits `max_seq_length`).
"""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace
from typing import Literal, Optional, Union

from pydantic import ConfigDict, Field, ValidationInfo, field_validator, model_validator

from tt_host.spec.compiler import compile_system_message
from tt_host.spec.schema import BehaviorSpec, StrictModel, resolve_path

from tt_engine_adapter import lengthcheck, rows
from tt_stagekit.launcher import endpoint_error, nodes_error

HEX40 = re.compile(r"^[0-9a-f]{40}$")
# A branch or tag name as the hub takes it (git's ref rules, simplified): `main`, `v1.0`, `refs/pr/3`.
REF_NAME = re.compile(r"^(?!.*\.\.)(?!.*//)(?!.*\.lock$)[A-Za-z0-9][A-Za-z0-9._/-]{0,254}(?<![/.])$")
HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")
MODULE_NAME = re.compile(r"^[A-Za-z0-9_.]+$")


def _compiled(info: ValidationInfo) -> str:
    """The host compiler's system message for the fields validated so far (tt_host.spec.compiler)."""
    fields = {key: info.data.get(key) for key in ("system_prompt", "guidelines", "constraints")}
    return compile_system_message(SimpleNamespace(**fields))


class Hyperparameters(StrictModel):
    """LoRA and training knobs. Strict types: "3" is not an int here."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    n_epochs: int = Field(3, ge=1, le=1000, description="Passes over the training rows.")
    max_steps: Optional[int] = Field(None, ge=1, description="Stop after this many optimizer steps (caps n_epochs).")
    learning_rate: float = Field(2e-4, gt=0, le=1)
    batch_size: int = Field(4, ge=1, le=4096, description="Rows per micro-batch.")
    gradient_accumulation_steps: int = Field(1, ge=1, le=4096)
    lora_rank: int = Field(16, ge=1, le=4096)
    lora_alpha: float = Field(32.0, gt=0, le=1e6)
    lora_dropout: float = Field(0.05, ge=0, lt=1)
    lora_target_modules: Union[Literal["all-linear"], list[str]] = Field(
        "all-linear", description='"all-linear" (every linear layer but the output head) or module names.'
    )
    max_seq_length: int = Field(1024, ge=8, le=1_048_576)
    max_eval_examples: Optional[int] = Field(None, ge=1, description="Evaluate at most this many held-out rows.")
    max_new_tokens: int = Field(128, ge=1, le=32768, description="Generation budget per evaluated prompt.")
    eval_batch_size: int = Field(16, ge=1, le=4096)
    warmup_ratio: float = Field(0.1, ge=0, le=1)
    lr_scheduler: Literal["cosine", "linear", "constant"] = "cosine"
    weight_decay: float = Field(0.0, ge=0, le=10)
    max_grad_norm: Optional[float] = Field(1.0, gt=0)
    precision: Literal["auto", "bf16", "fp32"] = Field("auto", description="auto: bf16 on CUDA when supported, else fp32.")
    checkpoint_interval_steps: int = Field(50, ge=1)
    keep_checkpoints: int = Field(2, ge=1, le=1000)
    log_interval_steps: int = Field(1, ge=1)
    seed: int = Field(42, ge=0, le=2**32 - 1)
    nproc_per_node: int = Field(1, ge=1, le=64, description="Training processes (GPUs) per node; above 1 trains under torchrun with DistributedDataParallel.")
    nnodes: int = Field(1, ge=1, le=1024, description="Machines taking part in training; above 1 needs rdzv_endpoint.")
    node_rank: int = Field(0, ge=0, le=1023, description="This machine's index among nnodes.")
    rdzv_endpoint: Optional[str] = Field(None, min_length=1, max_length=255, description="host:port of node 0 (multi-node).")

    @field_validator("rdzv_endpoint")
    @classmethod
    def _endpoint(cls, value: Optional[str]) -> Optional[str]:
        if value is not None and (error := endpoint_error(value)):
            raise ValueError(error)
        return value.strip() if value is not None else None

    @model_validator(mode="after")
    def _world(self) -> "Hyperparameters":
        if error := nodes_error("hyperparameters.", self.nnodes, self.node_rank, self.rdzv_endpoint):
            raise ValueError(error)
        world = self.nproc_per_node * self.nnodes
        if world > 1 and self.batch_size % world:
            raise ValueError(
                f"hyperparameters.batch_size ({self.batch_size}) rows per micro-batch cannot be split evenly across "
                f"{world} processes (hyperparameters.nproc_per_node {self.nproc_per_node} × hyperparameters.nnodes "
                f"{self.nnodes}): make hyperparameters.batch_size a multiple of {world}"
            )
        return self

    @field_validator("lora_target_modules")
    @classmethod
    def _modules(cls, value: Union[str, list[str]]) -> Union[str, list[str]]:
        if isinstance(value, list):
            if not value:
                raise ValueError('give at least one module name, or "all-linear"')
            for name in value:
                if not MODULE_NAME.match(name):
                    raise ValueError(f"{name!r} is not a module name")
            if len(set(value)) != len(value):
                raise ValueError("module names repeat")
        return value


class Datasets(StrictModel):
    """Optional prebuilt chat JSONL datasets, paths beside the spec."""

    train: Optional[str] = None
    validation: Optional[str] = None
    test: Optional[str] = None

    @field_validator("train", "validation", "test")
    @classmethod
    def _exists(cls, value: Optional[str], info: ValidationInfo) -> Optional[str]:
        path = resolve_path(value, info)
        if path is None:
            return None
        try:
            rows.read_chat_jsonl(path, info.field_name, None)
        except rows.RowError as exc:
            raise ValueError(str(exc)) from None
        return str(path)

    def paths(self) -> dict[str, Path]:
        return {split: Path(getattr(self, split)) for split in rows.SPLITS if getattr(self, split)}


class AdapterSpec(BehaviorSpec):
    """A behavior spec for the adapter engine."""

    engine: Literal["adapter"] = "adapter"
    base_model: str = Field(min_length=1, description="Local Hugging Face model folder (beside the spec) or hub id.")
    base_model_revision: Optional[str] = Field(
        None, validate_default=True,
        description="Commit (40 hex), branch or tag of a hub id; required for a hub id. Prefetch resolves a "
                    "branch or tag to its commit and every later stage uses that commit.",
    )
    hyperparameters: Hyperparameters = Field(default_factory=Hyperparameters)
    datasets: Optional[Datasets] = None
    device: Literal["auto", "cpu", "cuda", "mps"] = "auto"

    @field_validator("base_model")
    @classmethod
    def _base_model(cls, value: str, info: ValidationInfo) -> str:
        value = value.strip()
        local = resolve_path(value, info)
        looks_local = value.startswith((".", "/", "~")) or "\\" in value or value.count("/") > 1
        if local is not None and local.exists():
            if not local.is_dir():
                raise ValueError(f"{local} is not a folder")
            if not (local / "config.json").is_file():
                raise ValueError(f"local model folder {local} has no config.json")
            return str(local)
        if looks_local or not HUB_ID.match(value):
            raise ValueError(f"local model folder {local} does not exist")
        return value

    @field_validator("base_model_revision")
    @classmethod
    def _revision(cls, value: Optional[str], info: ValidationInfo) -> Optional[str]:
        base = info.data.get("base_model")
        if base is None:
            return value
        if Path(base).is_absolute():
            if value is not None:
                raise ValueError("applies only to a hub id; base_model is a local folder")
            return None
        if value is None:
            raise ValueError(f"required for hub id {base!r}: a 40-hex commit, a branch such as \"main\" or a tag "
                             "(no local folder of that name exists)")
        value = value.strip()
        if not (HEX40.match(value) or REF_NAME.match(value)):
            raise ValueError(f"{value!r} is neither a 40-hex commit id nor a branch or tag name")
        return value

    @field_validator("hyperparameters")
    @classmethod
    def _instruction_fits(cls, value: Hyperparameters, info: ValidationInfo) -> Hyperparameters:
        """Refuse what can be proven too long without a tokenizer (lengthcheck); prefetch checks exactly."""
        if info.data.get("base_model") is None:
            return value
        system = _compiled(info)
        answers = [example.output for example in info.data.get("examples", [])]
        error = lengthcheck.length_error(info.data["base_model"], system, answers, value.max_seq_length)
        if error:
            raise ValueError(error)
        return value

    @field_validator("datasets")
    @classmethod
    def _datasets(cls, value: Optional[Datasets], info: ValidationInfo) -> Optional[Datasets]:
        if value is None:
            return value
        system = _compiled(info)
        inputs = [example.input for example in info.data.get("examples", [])]
        try:
            rows.check_datasets(value.paths(), system, inputs)
        except rows.RowError as exc:
            raise ValueError(str(exc)) from None
        return value

    @model_validator(mode="after")
    def _enough_rows(self) -> "AdapterSpec":
        if len(self.examples) < 2 and not (self.datasets and self.datasets.train):
            raise ValueError("examples: at least 2 examples are needed (or a prebuilt datasets.train)")
        return self
