"""Resolve, fingerprint and load the base model and its tokenizer.

A local folder is used in place and fingerprinted (file sizes and sha256).
A hub id is fetched once by the prefetch stage with `huggingface_hub` into
the Hugging Face cache. Its revision may be a 40-hex commit (found in the
cache first, downloaded only when missing) or a branch or tag: that one is
resolved by asking the hub for its current commit, or, with HF_HUB_OFFLINE=1,
from the cache's `refs/<name>` file. The record names the commit; every later
stage loads that snapshot with `local_files_only=True` (and HF_HUB_OFFLINE=1),
so nothing but prefetch touches the network.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Optional

from tt_engine_adapter.formats import fingerprint
from tt_engine_adapter.runtime import bitsandbytes_gate
from tt_engine_adapter.runtime.config import AdapterRequest
from tt_stagekit import devices
from tt_stagekit.protocol import InvalidInput, StageError, log

COMMIT = re.compile(r"^[0-9a-f]{40}\Z")


def go_offline() -> None:
    """Forbid hub access for the rest of this process (call before importing transformers)."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def fetch(name: str, revision: Optional[str] = None) -> dict[str, Any]:
    """Make the base model `name` (an absolute local folder or a hub id at `revision`) available locally;
    returns {path, name, revision, fingerprint}.

    For a hub id, `revision` is the commit and `requested_revision` what the spec said.
    """
    if Path(name).is_absolute():
        path = Path(name)
        if not path.is_dir():
            raise InvalidInput(f"base_model: local model folder {path} does not exist")
        problems = fingerprint.model_folder_problems(path)
        if problems:
            raise InvalidInput(f"base_model: {path}: " + "; ".join(problems))
        return {"path": str(path), "name": name, "revision": None, "fingerprint": fingerprint.folder_fingerprint(path)}
    if not revision:
        raise InvalidInput("base_model_revision: required for a hub id")
    path = _hub_snapshot(name, revision)
    commit = path.name
    if not COMMIT.match(commit):
        raise StageError(f"base_model: {name}@{revision} resolved to {path}, which is not a snapshot folder named "
                         "by its commit; clear that entry from the Hugging Face cache and run again")
    if commit != revision:
        log(f"{name}@{revision} is commit {commit}; the rest of this run uses that commit")
    problems = fingerprint.model_folder_problems(path)
    if problems:
        raise StageError(f"base_model: {name}@{commit} is incomplete: " + "; ".join(problems))
    return {"path": str(path), "name": name, "revision": commit, "requested_revision": revision, "fingerprint": None}


def _hub_snapshot(name: str, revision: str) -> Path:
    """The cached snapshot folder of `name` at `revision` (a commit, branch or tag), downloading it if needed.

    A commit is looked up in the cache first. A branch or tag moves, so it is
    resolved by the hub unless HF_HUB_OFFLINE=1, when the cache's refs decide.
    """
    from huggingface_hub import constants, snapshot_download

    offline = bool(constants.HF_HUB_OFFLINE)
    if COMMIT.match(revision) or offline:
        try:
            path = Path(snapshot_download(repo_id=name, revision=revision, local_files_only=True))
            log(f"{name}@{revision} found in the Hugging Face cache ({constants.HF_HUB_CACHE})")
            return path
        except Exception as exc:
            if offline:
                raise StageError(
                    f"base_model: {name}@{revision} is not in the Hugging Face cache ({constants.HF_HUB_CACHE}) and "
                    f"HF_HUB_OFFLINE=1 forbids downloading it ({type(exc).__name__}); unset HF_HUB_OFFLINE, or "
                    f"fetch it first with `hf download {name} --revision {revision}`") from None
    log(f"fetching {name}@{revision} into the Hugging Face cache")
    try:
        return Path(snapshot_download(repo_id=name, revision=revision))
    except Exception as exc:
        raise StageError(f"base_model: cannot download {name}@{revision}: {type(exc).__name__}: {exc}") from None


def resolved(request: AdapterRequest) -> dict[str, Any]:
    """The prefetch stage's record of the base model (later stages never resolve it again)."""
    base = request.output("prefetch", "base_model")
    if base is None:
        raise StageError("the prefetch stage has not completed in this run")
    return dict(base)


def pick_device(request: AdapterRequest) -> str:
    """The device for this stage: the request's, else the spec's `device`, else the best available.

    Also applies TT_NUM_THREADS (torch CPU threads) when set.
    """
    import torch

    threads = os.environ.get("TT_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0:
        torch.set_num_threads(int(threads))
    wanted = request.device if request.device != "auto" else request.spec.device
    return devices.pick_device(wanted)


def pick_dtype(device: str, precision: str):
    """The compute dtype: fp32, bf16 (CUDA with bf16), fp16 (CUDA; training adds a gradient scaler).

    auto: bf16 where the GPU supports it, fp16 on other CUDA GPUs (T4, V100), fp32 elsewhere.
    """
    import torch

    if precision == "fp32":
        return torch.float32
    bf16_ok = device == "cuda" and torch.cuda.is_bf16_supported()
    if precision == "bf16":
        if not bf16_ok:
            raise InvalidInput("hyperparameters.precision: bf16 needs a CUDA device that supports it; "
                               "use \"fp16\" or \"auto\"")
        return torch.bfloat16
    if precision == "fp16":
        if device != "cuda":
            raise InvalidInput(f"hyperparameters.precision: fp16 training needs a CUDA device (this stage runs on "
                               f"{device}); use \"auto\" or \"fp32\"")
        return torch.float16
    if bf16_ok:
        return torch.bfloat16
    return torch.float16 if device == "cuda" else torch.float32


def quantization(device: str, dtype):
    """The usual QLoRA settings (NF4, double quantization, compute in the run's dtype) for `load_in_4bit`."""
    import torch
    from transformers import BitsAndBytesConfig

    if device != "cuda":
        raise InvalidInput(f"hyperparameters.load_in_4bit: 4-bit QLoRA needs a CUDA device (this stage runs on "
                           f"{device}); set it to false")
    if bitsandbytes_gate.hidden():
        nodes = ", ".join(bitsandbytes_gate.DEVICE_NODES)
        raise StageError(f"hyperparameters.load_in_4bit: bitsandbytes was left out when this stage started, because "
                         f"none of {nodes} exists here though torch sees CUDA; run again with "
                         f"{bitsandbytes_gate.FORCE_ENV}=1 in tt's environment to keep it")
    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                              bnb_4bit_compute_dtype=dtype if dtype != torch.float32 else torch.bfloat16)


def load_tokenizer(path: str):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(path, local_files_only=True)
    except Exception as exc:
        raise StageError(f"base_model: cannot load the tokenizer from {path}: {type(exc).__name__}: {exc}") from None


def load_model(path: str, device: str, dtype, load_in_4bit: bool = False):
    """The base model on `device` in `dtype`; with `load_in_4bit` its linear layers in 4-bit NF4 (CUDA)."""
    from transformers import AutoModelForCausalLM

    kwargs = {"dtype": dtype}
    if load_in_4bit:
        import torch

        kwargs = {"quantization_config": quantization(device, dtype), "dtype": dtype,
                  "device_map": {"": torch.cuda.current_device()}}
    try:
        model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, **kwargs)
    except Exception as exc:
        raise StageError(f"base_model: cannot load the model from {path}: {type(exc).__name__}: {exc}") from None
    return model if load_in_4bit else model.to(device)
