"""Host-side description of the adapter engine (pydantic + tt_host only, never torch).

Registers the `adapter` engine through the `tt` entry-point group: its strict
spec model, its stages and their fingerprint inputs, its runtime project and
its doctor checks.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any, Iterable, Optional

from tt_host.api import (SERVE_HF, SERVE_ON_BASE, BehaviorSpec, Check, DistributedSettings, Engine, Export, ModelKind,
                         Serve, Stage, hookimpl, torch_device_check, world_size_check)

from tt_engine_adapter import memory_estimate, memory_plan
from tt_engine_adapter.formats import tuning
from tt_engine_adapter.formats import fingerprint
from tt_engine_adapter.spec import HEX40, AdapterSpec
from tt_stagekit.gpus import first_gpu_memory_bytes, nvidia_gpus
from tt_stagekit.launcher import stage_arguments

# ---------------------------------------------------------------- stage inputs

def _instruction(spec: AdapterSpec) -> dict[str, Any]:
    return {
        "system_prompt": spec.system_prompt,
        "guidelines": list(spec.guidelines),
        "constraints": list(spec.constraints),
        "examples": [example.model_dump() for example in spec.examples],
        "datasets": spec.datasets.fingerprint() if spec.datasets else {},
    }


def _base_model(spec: AdapterSpec) -> dict[str, Any]:
    if Path(spec.base_model).is_absolute():
        return {"base_model": spec.base_model, "fingerprint": fingerprint.folder_fingerprint(spec.base_model)}
    return {"base_model": spec.base_model, "revision": spec.base_model_revision}


EVAL_KEYS = ("max_seq_length", "max_eval_examples", "max_new_tokens", "eval_batch_size", "precision", "load_in_4bit")


def _prefetch_inputs(spec: AdapterSpec) -> dict[str, Any]:
    return {**_base_model(spec), "max_seq_length": spec.hyperparameters.max_seq_length,
            "train_on_turns": spec.hyperparameters.train_on_turns}


def _eval_inputs(spec: AdapterSpec) -> dict[str, Any]:
    hp = spec.hyperparameters.model_dump(mode="json")
    return {**_base_model(spec), "eval": {key: hp[key] for key in EVAL_KEYS}}


def _train_inputs(spec: AdapterSpec) -> dict[str, Any]:
    hp = spec.hyperparameters.model_dump(mode="json")
    training = {k: v for k, v in hp.items() if k not in EVAL_KEYS or k in ("max_seq_length", "precision", "load_in_4bit")}
    for key in ("checkpoint_interval_steps", "keep_checkpoints", "log_interval_steps", "gradient_checkpointing",
                "sharding", "fsdp_cpu_offload"):
        training.pop(key)  # bookkeeping (or memory, not arithmetic), not results
    for key in DISTRIBUTED_KEYS:
        training.pop(key)  # how many processes compute it, not what (a checkpoint refuses another world size)
    return {**_base_model(spec), **_instruction(spec), "training": training}


DISTRIBUTED_KEYS = tuple(DistributedSettings.model_fields)


def _train_launch(spec: AdapterSpec) -> list[str]:
    """torchrun when hyperparameters.nproc_per_node × nnodes > 1, else the plain module."""
    return stage_arguments(spec.hyperparameters.model_dump(), "tt_engine_adapter.stages.train")


def _reference_inputs(spec: AdapterSpec) -> dict[str, Any]:
    """The pairs and their reference log-probs: the train stage's chain (via needs), the pairs' source and the
    reference; not the loss, beta or the optimizer, so a rerun changing only those reuses the stage."""
    hp = spec.hyperparameters
    return {**_base_model(spec), "max_seq_length": hp.max_seq_length, "max_new_tokens": hp.max_new_tokens,
            "eval_batch_size": hp.eval_batch_size, "seed": hp.seed, "precision": hp.precision,
            "load_in_4bit": hp.load_in_4bit, "graders": _graders(spec),
            "preference": spec.preference.fingerprint_inputs() if spec.preference else None}


def _preference_inputs(spec: AdapterSpec) -> dict[str, Any]:
    hp = spec.hyperparameters.model_dump(mode="json")
    keep = ("max_seq_length", "precision", "load_in_4bit", "seed", "warmup_ratio", "lr_scheduler", "weight_decay",
            "max_grad_norm", "lora_dropout")
    return {**_base_model(spec), "training": {k: hp[k] for k in keep},
            "preference": spec.preference.model_dump(mode="json") if spec.preference else None}


def _graders(spec: AdapterSpec) -> Any:
    """What a stage graded by the spec's graders depends on beyond the examples (which `needs=("train",)` chains in):
    the declared `evaluation.graders` (None: derived from the examples' outputs)."""
    graders = spec.evaluation.graders if spec.evaluation else None
    return list(graders) if graders else None


def _reinforce_inputs(spec: AdapterSpec) -> dict[str, Any]:
    return {**_train_inputs(spec), "graders": _graders(spec),
            "reinforcement": spec.reinforcement.model_dump(mode="json") if spec.reinforcement else None}


def _tuning(name: str):
    """`Stage.enabled` of a tuning stage (or `sft`): whether this spec's tuning block adds it (formats/tuning.py)."""
    return lambda spec: tuning.runs_stage(spec, name)


# The tuning stages after SFT (formats/tuning.py): `sft` evaluates the train stage's adapter, then the stages of the spec's
# tuning block; `candidate` evaluates the final adapter and its fingerprint holds every tuning stage's. Each is
# replaceable: a rerun with other tuning settings runs again what they change and reuses the rest. A new tuning
# stage is a Stage entry here (and its block's stage names in tuning.TUNING).
TUNING_STAGES = (
    Stage(tuning.SFT, "tt_engine_adapter.stages.evaluate", inputs=_eval_inputs, evaluates=tuning.SFT,
          enabled=_tuning(tuning.SFT), replaceable=True, needs=("train",),
          description="evaluate base + SFT adapter on the held-out rows (before the tuning stage)"),
    Stage("reference", "tt_engine_adapter.stages.reference", inputs=_reference_inputs, needs=("train",),
          enabled=_tuning("reference"), replaceable=True,
          description="preference pairs (derived from training prompts, or the file's) and reference log-probs"),
    Stage("preference", "tt_engine_adapter.stages.preference", inputs=_preference_inputs, needs=("train", "reference"),
          enabled=_tuning("preference"), replaceable=True,
          description="DPO / SimPO / KTO on the SFT adapter"),
    Stage("reinforce", "tt_engine_adapter.stages.reinforce", inputs=_reinforce_inputs, needs=("train",),
          enabled=_tuning("reinforce"), replaceable=True,
          description="GRPO on the SFT adapter, rewarded by the spec's graders"),
)


STAGES = (
    Stage("prepare", "tt_engine_adapter.stages.prepare", inputs=_instruction, gets_train_rows=True, gets_synthetic_rows=True,
          description="check and write the training rows"),
    Stage("prefetch", "tt_engine_adapter.stages.prefetch", inputs=_prefetch_inputs,
          description="resolve the base model and check the chat template"),
    Stage("baseline", "tt_engine_adapter.stages.evaluate", inputs=_eval_inputs, evaluates="baseline", benchmarks=True,
          description="evaluate the base model on the held-out rows"),
    Stage("train", "tt_engine_adapter.stages.train", inputs=_train_inputs, launch=_train_launch,
          description="LoRA fine-tuning"),
    *TUNING_STAGES,
    Stage("candidate", "tt_engine_adapter.stages.evaluate", inputs=_eval_inputs, evaluates="candidate", benchmarks=True,
          replaceable=True, needs=("train", *(stage.name for stage in TUNING_STAGES if stage.name != tuning.SFT)),
          description="evaluate base + the final adapter on the same rows"),
)


# ---------------------------------------------------------------- doctor

def _nvidia_gpus() -> list[tuple[str, str]]:
    """(name, compute capability) of each visible NVIDIA GPU, without importing torch."""
    return [(gpu.name, gpu.compute_cap) for gpu in nvidia_gpus() or []]


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
    repo = memory_plan.hf_cache_dir() / f"models--{spec.base_model.replace('/', '--')}"
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
                        "" if bf16 else "bf16 needs compute capability 8.0+; training uses fp16 with a gradient scaler")
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


def _model_folder(spec: AdapterSpec) -> Optional[Path]:
    """The base model's files on this machine: the local folder, or the cached snapshot of its revision."""
    return memory_plan.model_folder(spec.base_model, spec.base_model_revision)


def _memory_check(spec: AdapterSpec, device: str) -> Optional[Check]:
    hp = spec.hyperparameters
    gpus = _nvidia_gpus() if device in ("cuda", "auto") else []
    if gpus:
        name, cap = gpus[0]
        try:
            bf16 = float(cap) >= 8.0
        except ValueError:
            bf16 = False
        fp16 = hp.precision == "fp16" or (hp.precision == "auto" and not bf16)
        size = 4 if hp.precision == "fp32" else 2
        return memory_estimate.memory_check(hp, _model_folder(spec), f"cuda: {name}", first_gpu_memory_bytes(), size, fp16)
    if device in ("cpu", "auto"):
        return memory_estimate.memory_check(hp, _model_folder(spec), "cpu (available memory)",
                                            memory_estimate.available_cpu_bytes(), 4)
    return None


def plan_notes(spec: BehaviorSpec) -> Iterable[str]:
    """What `tt validate` says of a valid spec's plan: its training peak per rank against the devices it names
    (a plan that cannot fit never gets here: the spec refuses it, memory_plan)."""
    if isinstance(spec, AdapterSpec):
        yield memory_plan.plan_line(spec.hyperparameters, spec.device, _model_folder(spec))


def doctor(spec: Optional[BehaviorSpec], device: str) -> Iterable[Check]:
    if isinstance(spec, AdapterSpec):
        yield from _base_model_checks(spec)
        if device == "auto" and spec.device != "auto":
            device = spec.device
    yield from _device_checks(device or "auto")
    if isinstance(spec, AdapterSpec):
        yield torch_device_check(ENGINE, device or "auto", "torch device")  # torch's own view, in the environment
        yield world_size_check("hyperparameters.nproc_per_node", spec.hyperparameters, device or "auto")
        memory = _memory_check(spec, device or "auto")
        if memory is not None:
            yield memory


# The trained LoRA weights are served on their base model; `tt models export` copies them as they are (the
# PEFT format), `--merged` merges them into the base (tt_engine_adapter.stages.export, kind EXPORT_KIND);
# `--format gguf|ollama` merges them and writes GGUF (tt_engine_adapter.stages.export_gguf; not served by tt).
QUANTS = ("f16", "bf16", "q8_0", "q4_0", "f32")
FORMATS = {"gguf": Export("tt_engine_adapter.stages.export_gguf", "merged-gguf", QUANTS),
           "ollama": Export("tt_engine_adapter.stages.export_gguf", "merged-ollama", QUANTS)}
MODEL_KINDS = (
    ModelKind("adapter", "train/adapter", serve=SERVE_ON_BASE, info_file="tt-adapter.json",
              export=Export(None, "adapter"), export_merged=Export("tt_engine_adapter.stages.export", "merged"),
              formats=FORMATS),
    ModelKind("merged", serve=SERVE_HF, info_file="tt-export.json"),
)

STARTER = {"base_model": "TODO: a local Hugging Face model folder or a hub id"}


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
    model_kinds=MODEL_KINDS,
    # The OpenAI-compatible server loads any Hugging Face folder, with LoRA weights on it (tt serve).
    serve=Serve("tt_engine_adapter.serve", hf_folders=True),
    starter=STARTER,
    plan_notes=plan_notes,
    stage_server="tt_engine_adapter.stages.warm",  # with TT_STAGE_SERVER=1 (docs/operations.md "Stage server")
    host_api="1.4",
)


@hookimpl
def tt_engines():
    yield ENGINE
