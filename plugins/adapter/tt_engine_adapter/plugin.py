"""Host-side description of the adapter engine (pydantic + tt_host only, never torch).

Registers the `adapter` engine through the `tt` entry-point group: its strict
spec model, its stages and their fingerprint inputs, its runtime project and
its doctor checks.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any, Iterable, Literal, Optional, Union

from pydantic import ConfigDict, Field, ValidationInfo, field_validator, model_validator

from tt_host.engine import Check, Engine, Stage
from tt_host.hookspecs import hookimpl
from tt_host.preflight import torch_device_check
from tt_host.spec.schema import BehaviorSpec, StrictModel, resolve_path

from tt_engine_adapter import fingerprint, lengthcheck, rows
from tt_stagekit.launcher import endpoint_error, nodes_error, stage_arguments

HEX40 = re.compile(r"^[0-9a-f]{40}$")
# A branch or tag name as the hub takes it (git's ref rules, simplified): `main`, `v1.0`, `refs/pr/3`.
REF_NAME = re.compile(r"^(?!.*\.\.)(?!.*//)(?!.*\.lock$)[A-Za-z0-9][A-Za-z0-9._/-]{0,254}(?<![/.])$")
HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")
MODULE_NAME = re.compile(r"^[A-Za-z0-9_.]+$")


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
        system = rows.compile_system_message(
            info.data.get("system_prompt", ""), info.data.get("guidelines", []), info.data.get("constraints", [])
        )
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
        system = rows.compile_system_message(
            info.data.get("system_prompt", ""), info.data.get("guidelines", []), info.data.get("constraints", [])
        )
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


# ---------------------------------------------------------------- stage inputs

def _instruction(spec: AdapterSpec) -> dict[str, Any]:
    return {
        "system_prompt": spec.system_prompt,
        "guidelines": list(spec.guidelines),
        "constraints": list(spec.constraints),
        "examples": [example.model_dump() for example in spec.examples],
        "datasets": {split: {"path": str(p), "sha256": fingerprint.sha256_file(p)}
                     for split, p in (spec.datasets.paths().items() if spec.datasets else [])},
    }


def _base_model(spec: AdapterSpec) -> dict[str, Any]:
    if Path(spec.base_model).is_absolute():
        return {"base_model": spec.base_model, "fingerprint": fingerprint.folder_fingerprint(spec.base_model)}
    return {"base_model": spec.base_model, "revision": spec.base_model_revision}


EVAL_KEYS = ("max_seq_length", "max_eval_examples", "max_new_tokens", "eval_batch_size", "precision")


def _prefetch_inputs(spec: AdapterSpec) -> dict[str, Any]:
    return {**_base_model(spec), "max_seq_length": spec.hyperparameters.max_seq_length}


def _eval_inputs(spec: AdapterSpec) -> dict[str, Any]:
    hp = spec.hyperparameters.model_dump(mode="json")
    return {**_base_model(spec), "eval": {key: hp[key] for key in EVAL_KEYS}}


def _train_inputs(spec: AdapterSpec) -> dict[str, Any]:
    hp = spec.hyperparameters.model_dump(mode="json")
    training = {k: v for k, v in hp.items() if k not in EVAL_KEYS or k in ("max_seq_length", "precision")}
    for key in ("checkpoint_interval_steps", "keep_checkpoints", "log_interval_steps"):
        training.pop(key)  # bookkeeping, not results
    for key in DISTRIBUTED_KEYS:
        training.pop(key)  # how many processes compute it, not what (a checkpoint refuses another world size)
    return {**_base_model(spec), **_instruction(spec), "training": training}


DISTRIBUTED_KEYS = ("nproc_per_node", "nnodes", "node_rank", "rdzv_endpoint")


def _train_launch(spec: AdapterSpec) -> list[str]:
    """torchrun when hyperparameters.nproc_per_node × nnodes > 1, else the plain module."""
    return stage_arguments(spec.hyperparameters.model_dump(), "tt_engine_adapter.stages.train")


STAGES = (
    Stage("prepare", "tt_engine_adapter.stages.prepare", inputs=_instruction, gets_train_rows=True,
          description="check and write the training rows"),
    Stage("prefetch", "tt_engine_adapter.stages.prefetch", inputs=_prefetch_inputs,
          description="resolve the base model and check the chat template"),
    Stage("baseline", "tt_engine_adapter.stages.evaluate", inputs=_eval_inputs, evaluates="baseline",
          description="evaluate the base model on the held-out rows"),
    Stage("train", "tt_engine_adapter.stages.train", inputs=_train_inputs, launch=_train_launch,
          description="LoRA fine-tuning"),
    Stage("candidate", "tt_engine_adapter.stages.evaluate", inputs=_eval_inputs, evaluates="candidate",
          description="evaluate base + adapter on the same rows"),
)


# ---------------------------------------------------------------- doctor

def _hf_cache_dir() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface")
    return Path(home).expanduser() / "hub"


def _nvidia_gpus() -> list[tuple[str, str]]:
    """(name, compute capability) of each NVIDIA GPU, without importing torch."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return []
    try:
        out = subprocess.run([exe, "--query-gpu=name,compute_cap", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=15, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = []
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2:
            gpus.append((parts[0], parts[1]))
    return gpus


def _base_model_checks(spec: AdapterSpec) -> Iterable[Check]:
    if Path(spec.base_model).is_absolute():
        problems = fingerprint.model_folder_problems(spec.base_model)
        if problems:
            yield Check("base model", "fail", f"{spec.base_model}: " + "; ".join(problems),
                        "point base_model at a complete Hugging Face model folder")
        else:
            yield Check("base model", "ok", f"local folder {spec.base_model} is complete")
        yield Check("base model revision", "ok", "local folder: pinned by its content fingerprint")
        return
    revision = str(spec.base_model_revision)
    repo = _hf_cache_dir() / f"models--{spec.base_model.replace('/', '--')}"
    if HEX40.match(revision):
        yield Check("base model revision", "ok", f"{spec.base_model} pinned at {revision}")
        commit = revision
    else:
        ref = repo / "refs" / revision
        commit = ref.read_text(encoding="utf-8").strip() if ref.is_file() else ""
        commit = commit if HEX40.match(commit) else ""
        yield Check("base model revision", "ok",
                    f"{spec.base_model}@{revision} (branch or tag): prefetch resolves it to a commit, recorded in the "
                    f"run and the adapter's manifest" + (f"; the cache has it at {commit}" if commit else ""))
    snapshot = repo / "snapshots" / commit if commit else None
    if snapshot is not None and snapshot.is_dir() and not fingerprint.model_folder_problems(snapshot):
        yield Check("base model", "ok", f"cached at {snapshot}")
    else:
        yield Check("base model", "warn", f"{spec.base_model}@{revision} is not in the cache",
                    "the prefetch stage downloads it once (network needed then)")


def _device_checks(device: str) -> Iterable[Check]:
    gpus = _nvidia_gpus()
    if device in ("cuda", "auto"):
        if gpus:
            name, cap = gpus[0]
            yield Check("device", "ok", f"cuda: {len(gpus)} GPU(s), {name} (compute {cap})")
            try:
                bf16 = float(cap) >= 8.0
            except ValueError:
                bf16 = False
            yield Check("bf16", "ok" if bf16 else "warn", f"compute capability {cap}",
                        "" if bf16 else "bf16 needs compute capability 8.0+; training falls back to fp32")
        elif device == "cuda":
            yield Check("device", "fail", "no NVIDIA GPU found (nvidia-smi)", "install the driver or use --device cpu")
        else:
            mps = platform.system() == "Darwin" and platform.machine() == "arm64"
            yield Check("device", "ok", "mps (Apple silicon)" if mps else "cpu (no GPU found): fine for tiny models")
    elif device == "mps":
        ok = platform.system() == "Darwin" and platform.machine() == "arm64"
        yield Check("device", "ok" if ok else "fail", "mps" if ok else "mps needs macOS on Apple silicon",
                    "" if ok else "use --device cpu")
    else:
        yield Check("device", "ok", f"{device}: {os.cpu_count()} CPU cores")


def _world_check(hp: Hyperparameters, device: str) -> Check:
    """The requested training world size against the devices present (one GPU per process on CUDA)."""
    world = hp.nproc_per_node * hp.nnodes
    where = f"{hp.nproc_per_node} process(es) per node × {hp.nnodes} node(s) = world size {world}"
    gpus = _nvidia_gpus() if device in ("cuda", "auto") else []
    if gpus:
        if hp.nproc_per_node > len(gpus):
            return Check("hyperparameters.nproc_per_node", "fail", f"{where}, but this node has {len(gpus)} GPU(s)",
                         f"set hyperparameters.nproc_per_node to at most {len(gpus)}")
        return Check("hyperparameters.nproc_per_node", "ok", f"{where}; NCCL on {hp.nproc_per_node} of {len(gpus)} GPU(s)")
    if world > 1 and device == "mps":
        return Check("hyperparameters.nproc_per_node", "fail", f"{where}: distributed training needs cuda or cpu",
                     "use --device cpu")
    cores = os.cpu_count() or 1
    status = "warn" if hp.nproc_per_node > cores else "ok"
    return Check("hyperparameters.nproc_per_node", status, f"{where}" + (f"; gloo on CPU ({cores} cores)" if world > 1 else ""),
                 f"use at most {cores} processes per node" if status == "warn" else "")


def doctor(spec: Optional[BehaviorSpec], device: str) -> Iterable[Check]:
    if isinstance(spec, AdapterSpec):
        yield from _base_model_checks(spec)
        if device == "auto" and spec.device != "auto":
            device = spec.device
    yield from _device_checks(device or "auto")
    if isinstance(spec, AdapterSpec):
        yield torch_device_check(ENGINE, device or "auto", "torch device")  # torch's own view, in the environment
        yield _world_check(spec.hyperparameters, device or "auto")


ENGINE = Engine(
    name="adapter",
    spec_model=AdapterSpec,
    stages=STAGES,
    # In a clone the environment is synced from the project (pyproject.toml + uv.lock); an installed
    # wheel has no project and ships its runtime as a lock (written by scripts/export-runtime-locks).
    runtime_project=Path(__file__).resolve().parents[1],
    runtime_lock=Path(__file__).resolve().parent / "pylock.runtime.toml",
    description="LoRA fine-tuning of a Hugging Face causal LM (PEFT), base versus tuned evaluation",
    sync_groups=("runtime",),
    doctor=doctor,
    min_examples=0,
)


@hookimpl
def tt_engines():
    yield ENGINE
