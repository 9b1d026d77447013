"""The foundation engine's plugin module: what the host needs, nothing heavy.

Registers the `foundation` engine (spec model, ordered stages with their
fingerprint inputs, doctor checks, runtime project). Imports pydantic, tt_host
and the stdlib only; torch lives in the engine environment.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional

from tt_host.engine import Check, Engine, Stage
from tt_host.hookspecs import hookimpl

from tt_stagekit.launcher import stage_arguments
from .runtime.corpus import list_shards
from .spec import FoundationSpec

_DIGESTS: dict[tuple[str, int, int], str] = {}


def _sha256(path: Path) -> str:
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if key not in _DIGESTS:
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        _DIGESTS[key] = digest.hexdigest()
    return _DIGESTS[key]


def corpus_digest(path: Optional[Path]) -> Optional[list[dict[str, Any]]]:
    """The sorted shard list with sizes and sha256 (None when unset)."""
    if path is None:
        return None
    try:
        shards = list_shards(path)
    except Exception as exc:  # surfaced properly by validation; keep fingerprints total
        return [{"error": str(exc)}]
    root = path if path.is_dir() else path.parent
    return [{"path": s.relative_to(root).as_posix(), "size": s.stat().st_size, "sha256": _sha256(s)} for s in shards]


def _f(spec: FoundationSpec) -> Mapping[str, Any]:
    return spec.foundation.model_dump(mode="json")


def _instruction(spec: FoundationSpec) -> dict[str, Any]:
    return {
        "system_prompt": spec.system_prompt,
        "guidelines": list(spec.guidelines),
        "constraints": list(spec.constraints),
        "examples": [e.model_dump() for e in spec.examples],
    }


def _pick(spec: FoundationSpec, *names: str) -> dict[str, Any]:
    f = _f(spec)
    return {name: f[name] for name in names}


def corpus_names(path: Optional[Path]) -> Optional[list[str]]:
    """The sorted shard names only: fixing a bad row later must not invalidate a finished tokenizer."""
    if path is None:
        return None
    try:
        shards = list_shards(path)
    except Exception as exc:
        return [f"error: {exc}"]
    root = path if path.is_dir() else path.parent
    return [s.relative_to(root).as_posix() for s in shards]


def tokenizer_inputs(spec: FoundationSpec) -> Mapping[str, Any]:
    # The corpus *content* is fingerprinted by token_cache (chained into every later stage);
    # here only its shard names, so a malformed row fixed after the tokenizer finished
    # lets the run resume (the tokenizer stays valid: it is lossless on any text).
    return {
        **_pick(spec, "vocab_size", "tokenizer_max_chars"),
        "corpus_shards": corpus_names(spec.foundation.corpus_path),
        **_instruction(spec),
    }


def token_cache_inputs(spec: FoundationSpec) -> Mapping[str, Any]:
    inputs: dict[str, Any] = {"corpus": corpus_digest(spec.foundation.corpus_path), **_pick(spec, "max_chars")}
    if spec.foundation.corpus_path is None:
        inputs["smoke"] = _instruction(spec)
    return inputs


PRETRAIN_FIELDS = (
    "depth", "vocab_size", "sequence_length", "batch_size", "gradient_accumulation_steps", "learning_rate",
    "weight_decay", "warmup_steps", "min_lr_ratio", "gradient_clip", "bf16", "seed", "pretrain_steps",
)


def pretrain_inputs(spec: FoundationSpec) -> Mapping[str, Any]:
    return _pick(spec, *PRETRAIN_FIELDS)


def bpb_inputs(spec: FoundationSpec) -> Mapping[str, Any]:
    inputs = {"validation": corpus_digest(spec.foundation.validation_path), **_pick(spec, "sequence_length", "batch_size")}
    if spec.foundation.validation_path is None:
        inputs["smoke"] = _instruction(spec)
    return inputs


def sft_inputs(spec: FoundationSpec) -> Mapping[str, Any]:
    return {**_pick(spec, "finetune_steps", "sequence_length", "batch_size", "learning_rate", "weight_decay",
                    "gradient_clip", "seed", "bf16"), **_instruction(spec)}


def rl_inputs(spec: FoundationSpec) -> Mapping[str, Any]:
    return {**_pick(spec, "rl_steps", "sequence_length", "batch_size", "learning_rate", "gradient_clip", "seed", "bf16"),
            **_instruction(spec)}


def chat_eval_inputs(spec: FoundationSpec) -> Mapping[str, Any]:
    return {**_pick(spec, "sequence_length", "rl_steps", "bf16"), **_instruction(spec)}


def _rl_enabled(spec: FoundationSpec) -> bool:
    return spec.foundation.rl_steps > 0


def _general_enabled(spec: FoundationSpec) -> bool:
    return spec.evaluation is not None and spec.evaluation.general_regression is not None


def _launch(module: str):
    """Stage.launch for the training stages: torchrun when nproc_per_node × nnodes > 1."""
    def launch(spec: FoundationSpec) -> list[str]:
        return stage_arguments(_f(spec), module)
    return launch


STAGES = (
    Stage("tokenizer", "tt_engine_foundation.stages.tokenizer", inputs=tokenizer_inputs, gets_train_rows=True,
          description="train the byte-level BPE tokenizer"),
    Stage("token_cache", "tt_engine_foundation.stages.token_cache", inputs=token_cache_inputs, gets_train_rows=True,
          description="encode the corpus into the token cache"),
    Stage("pretrain", "tt_engine_foundation.stages.pretrain", inputs=pretrain_inputs,
          launch=_launch("tt_engine_foundation.stages.pretrain"), description="pretrain the GPT with recoverable checkpoints"),
    Stage("bpb", "tt_engine_foundation.stages.bpb", inputs=bpb_inputs, gets_train_rows=True,
          description="held-out bits per byte"),
    Stage("sft", "tt_engine_foundation.stages.sft", inputs=sft_inputs, gets_train_rows=True,
          launch=_launch("tt_engine_foundation.stages.sft"), description="chat SFT on the training rows"),
    Stage("rl", "tt_engine_foundation.stages.rl", inputs=rl_inputs, enabled=_rl_enabled, gets_train_rows=True,
          description="on-policy RL with exact-answer rewards"),
    Stage("chat_eval", "tt_engine_foundation.stages.chat_eval", inputs=chat_eval_inputs, evaluates="chat_eval",
          gets_train_rows=True, general="candidate", description="generate answers for the held-out prompts"),
    # Last, so that adding it changed no earlier fingerprint: the pretrained model (before SFT) answers the
    # general-regression set as the gate's baseline (docs/evaluation.md).
    Stage("general_baseline", "tt_engine_foundation.stages.chat_eval", inputs=chat_eval_inputs,
          enabled=_general_enabled, gets_train_rows=True, general="baseline",
          description="answer the general-regression set with the pretrained model"),
)


def _path_checks(name: str, path: Optional[Path]) -> Iterable[Check]:
    if path is None:
        return
    if path.is_symlink():
        yield Check(name, "fail", f"{path} is a symbolic link", "point at the real file or folder")
    elif not path.exists():
        yield Check(name, "fail", f"{path} does not exist", "fix the path in tunedtensor.json")
    else:
        yield Check(name, "ok", str(path))


def _device_check(device: str) -> Check:
    has_nvidia = Path("/dev/nvidia0").exists() or shutil.which("nvidia-smi") is not None
    has_mps = platform.system() == "Darwin" and platform.machine() == "arm64"
    if device == "cuda":
        if has_nvidia:
            return Check("foundation.device", "ok", "an NVIDIA device is present")
        return Check("foundation.device", "fail", "device 'cuda' asked for but no NVIDIA device was found",
                     "use --device cpu or run on a machine with a CUDA GPU")
    if device == "mps":
        if has_mps:
            return Check("foundation.device", "ok", "Apple silicon (MPS) is present")
        return Check("foundation.device", "fail", "device 'mps' asked for but this is not an Apple silicon Mac",
                     "use --device cpu")
    if device == "auto":
        found = "cuda" if has_nvidia else ("mps" if has_mps else "cpu")
        return Check("foundation.device", "ok", f"auto picks {found}")
    return Check("foundation.device", "ok", "cpu")


def cuda_device_count() -> Optional[int]:
    """GPUs that `nvidia-smi -L` lists (None when nvidia-smi is missing or fails); never imports torch."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    count = sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))
    if visible is not None:
        count = min(count, len([v for v in visible.split(",") if v.strip() and v.strip() != "-1"]))
    return count


def world_check(name: str, nproc: int, nnodes: int, device: str) -> Check:
    """The requested world size against the devices present (CUDA: one GPU per process)."""
    world = nproc * nnodes
    where = f"{nproc} process(es) per node × {nnodes} node(s) = world size {world}"
    count = cuda_device_count() if device in ("cuda", "auto") else None
    if device == "cuda" or (device == "auto" and count):
        if count is None:
            return Check(name, "fail" if device == "cuda" else "warn", f"{where}; nvidia-smi -L lists no GPU",
                         "install the NVIDIA driver or use device cpu (gloo)")
        if nproc > count:
            return Check(name, "fail", f"{where}, but this node has {count} CUDA device(s) (nvidia-smi -L)",
                         f"set nproc_per_node to at most {count}")
        return Check(name, "ok", f"{where}; NCCL on {nproc} of {count} CUDA device(s)")
    if world == 1:
        return Check(name, "ok", "one process")
    if device == "mps":
        return Check(name, "fail", f"{where}: distributed training runs on cuda or cpu, not mps", "use device cpu")
    cores = os.cpu_count() or 1
    if nproc > cores:
        return Check(name, "warn", f"{where} with gloo on CPU, more processes than the {cores} CPU cores",
                     f"use at most {cores} processes per node")
    return Check(name, "ok", f"{where}; gloo on CPU ({cores} cores)")


def _disk_check(spec: FoundationSpec) -> Check:
    f = spec.foundation
    text_bytes = 0
    if f.corpus_path is not None and f.corpus_path.exists() and not f.corpus_path.is_symlink():
        try:
            text_bytes = sum(s.stat().st_size for s in list_shards(f.corpus_path))
        except Exception:
            text_bytes = 0
    text_bytes = min(text_bytes, f.max_chars * 4)
    per_token = 2 if f.vocab_size <= 1 << 16 else 4
    cache = text_bytes // 3 * per_token  # ~3 bytes of text per token
    width = f.depth * 64
    params = f.vocab_size * width * 2 + f.depth * (4 * width * width + 3 * width * ((8 * width // 3 + 63) // 64 * 64))
    checkpoints = params * 4 * 3 * (f.keep_checkpoints + 1)
    need = cache + checkpoints
    where = Path.cwd()
    free = shutil.disk_usage(where).free
    detail = f"need about {need / 1e9:.2f} GB (token cache {cache / 1e9:.2f} GB, checkpoints {checkpoints / 1e9:.2f} GB); {free / 1e9:.1f} GB free at {where}"
    if free < need:
        return Check("foundation.disk", "fail", detail, "free disk space or lower foundation.max_chars / keep_checkpoints")
    return Check("foundation.disk", "ok", detail)


def doctor(spec: Optional[FoundationSpec], device: str) -> Iterable[Check]:
    if spec is None:
        yield _device_check(device or "auto")
        return
    f = spec.foundation
    yield from _path_checks("foundation.corpus_path", f.corpus_path)
    yield from _path_checks("foundation.validation_path", f.validation_path)
    if f.corpus_path is not None and f.validation_path is not None:
        same = os.path.realpath(f.corpus_path) == os.path.realpath(f.validation_path)
        yield Check("foundation.validation_distinct", "fail" if same else "ok",
                    "validation_path is the training corpus" if same else "validation and training differ",
                    "use held-out text for validation_path" if same else "")
    if f.corpus_path is None:
        yield Check("foundation.corpus_path", "warn", "no corpus: the smoke corpus proves the wiring, not capability",
                    "set foundation.corpus_path to real text")
    chosen = device if device and device != "auto" else f.device
    yield _device_check(chosen)
    yield world_check("foundation.nproc_per_node", f.nproc_per_node, f.nnodes, chosen)
    yield _disk_check(spec)


ENGINE = Engine(
    name="foundation",
    spec_model=FoundationSpec,
    stages=STAGES,
    # In a clone the environment is synced from the project (pyproject.toml + uv.lock); an installed
    # wheel has no project and ships its runtime as a lock (written by scripts/export-runtime-locks).
    runtime_project=Path(__file__).resolve().parents[1],
    runtime_lock=Path(__file__).resolve().parent / "pylock.runtime.toml",
    description="Train a small Llama-layout GPT from scratch: tokenizer, token cache, pretraining, BPB, SFT, RL, chat eval",
    sync_groups=("runtime",),
    doctor=doctor,
    min_examples=2,
    host_api="1.0",
)


@hookimpl
def tt_engines():
    yield ENGINE
