"""The foundation engine's preflight (`tt doctor SPEC`): paths, the device as torch in the engine's
environment sees it, the world size against the devices, and an estimate of the disk a run will use.

Host side: pydantic, tt_host and the stdlib only (torch is asked through
`tt_host.checks.preflight.torch_device_check`, a subprocess of the environment of the engine it is given:
plugin.py passes its ENGINE, so this module does not import plugin.py).
"""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Iterable, Iterator, Optional

from tt_host.api import Check, DiskNeed, Engine, torch_device_check, world_size_check

from tt_engine_foundation.formats.shards import list_shards
from tt_engine_foundation.spec import FoundationSpec
from tt_stagekit.gpus import nvidia_gpus


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
    has_nvidia = Path("/dev/nvidia0").exists() or bool(nvidia_gpus())
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


def _presence_or_torch(engine: Engine, device: str) -> Check:
    """torch's own answer when the environment is prepared; else what the machine shows, and how to prepare."""
    check = torch_device_check(engine, device, "foundation.device")
    if check.data is not None or check.status == "fail":
        return check
    seen = _device_check(device)
    return Check("foundation.device", "fail" if seen.status == "fail" else "warn", f"{seen.detail}; {check.detail}",
                 "; ".join(h for h in (seen.hint, check.hint) if h))


def _bf16_check(spec: FoundationSpec, device: Check) -> Iterator[Check]:
    info = device.data or {}
    if spec.foundation.bf16 and info.get("device") == "cuda" and info.get("bf16") is False:
        yield Check("foundation.bf16", "warn", f"{info.get('gpu')} has no bf16 support; training would run in fp32",
                    "set foundation.bf16 to false to say so, or use a GPU with bf16 (compute capability 8.0+)")


CPU_BF16_FLAGS = ("amx_bf16", "avx512_bf16")  # /proc/cpuinfo's names for the units foundation.cpu_bf16 needs


def cpu_bf16_flags(cpuinfo: Optional[str]) -> Optional[set[str]]:
    """Which of CPU_BF16_FLAGS a /proc/cpuinfo text lists; None without one (not Linux, unreadable)."""
    if cpuinfo is None:
        return None
    flags: set[str] = set()
    for line in cpuinfo.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == "flags":
            flags.update(value.split())
    return flags & set(CPU_BF16_FLAGS)


def _read_cpuinfo() -> Optional[str]:
    try:
        return Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def cpu_bf16_check(spec: FoundationSpec, device: str, cpuinfo: Optional[str]) -> Iterator[Check]:
    """`foundation.cpu_bf16` on a CPU run: fail where the CPU lacks AMX and AVX-512 BF16 (the stage would refuse)."""
    if not spec.foundation.cpu_bf16 or device not in ("cpu", "auto"):
        return
    found = cpu_bf16_flags(cpuinfo)
    if found is None:
        yield Check("foundation.cpu_bf16", "warn", "cannot read this CPU's features (no /proc/cpuinfo); the pretrain "
                    "stage checks them through torch", "")
    elif found:
        yield Check("foundation.cpu_bf16", "ok", f"this CPU multiplies bf16 natively ({', '.join(sorted(found))})")
    else:
        status = "fail" if device == "cpu" else "warn"  # auto may still pick a GPU, where the setting is not read
        yield Check("foundation.cpu_bf16", status, "this CPU has no native bf16 matrix unit (AMX or AVX-512 BF16): "
                    "bf16 would train slower than float32 and the pretrain stage refuses it",
                    "set foundation.cpu_bf16 to false")


def parameters(depth: int, vocab_size: int) -> int:
    """Parameters of the model at `depth` (runtime/model.py's layout: width 64·depth, SwiGLU, untied head)."""
    width = depth * 64
    mlp = (8 * width // 3 + 63) // 64 * 64
    return vocab_size * width * 2 + depth * (4 * width * width + 3 * width * mlp)


def corpus_bytes(path: Optional[Path]) -> int:
    """Text bytes of the corpus shards (parquet counted at 3× its compressed size)."""
    if path is None or not path.exists() or path.is_symlink():
        return 0
    try:
        shards = list_shards(path)
    except Exception:
        return 0
    return sum(s.stat().st_size * (3 if s.suffix.lower() == ".parquet" else 1) for s in shards)


def disk_needs(spec: FoundationSpec) -> Iterator[DiskNeed]:
    """What a run of this spec writes: token cache, checkpoints (keep_checkpoints + 1 exist while the newest
    is written: fp32 weights + AdamW's two moments, 12 bytes a parameter), model folders, the backup."""
    f = spec.foundation
    if f.init_model is not None:
        weights = Path(f.init_model) / "model.safetensors"
        params = weights.stat().st_size // 4 if weights.is_file() else 0
    else:
        params = parameters(f.depth, f.vocab_size)
    checkpoint = params * 12
    keep = f.keep_checkpoints + 1
    if f.init_model is None:
        text = min(corpus_bytes(f.corpus_path), f.max_chars * 4)
        per_token = 2 if f.vocab_size <= 1 << 16 else 4
        tokens = text // 3 if f.vocab_size >= 8192 else text  # a small vocabulary merges little: ~1 token a byte
        yield DiskNeed("token cache", tokens * per_token, f"token cache ({text / 1e9:.2f} GB of text)")
        yield DiskNeed("pretraining checkpoints", checkpoint * keep, f"{keep} pretraining checkpoints")
        if f.checkpoint_backup_dir is not None:
            yield DiskNeed("foundation.checkpoint_backup_dir", checkpoint * keep, f"{keep} backed-up checkpoints",
                           folder=f.checkpoint_backup_dir, separate_disk=True)
    if f.finetune_steps > 0 and f.checkpoint_interval_steps > 0:
        yield DiskNeed("SFT checkpoints", checkpoint * keep, f"{keep} SFT checkpoints")
    folders = (1 if f.init_model is None else 0) + 1 + (1 if f.rl_steps > 0 else 0)
    yield DiskNeed("model folders", params * 4 * folders, f"{folders} model folders")


def doctor_checks(engine: Engine, spec: Optional[FoundationSpec], device: str) -> Iterable[Check]:
    """`Engine.doctor` of `engine` (the foundation engine of plugin.py)."""
    if spec is None:
        yield _presence_or_torch(engine, device or "auto")
        return
    f = spec.foundation
    yield from _path_checks("foundation.corpus_path", f.corpus_path)
    yield from _path_checks("foundation.validation_path", f.validation_path)
    if f.corpus_path is not None and f.validation_path is not None:
        same = os.path.realpath(f.corpus_path) == os.path.realpath(f.validation_path)
        yield Check("foundation.validation_distinct", "fail" if same else "ok",
                    "validation_path is the training corpus" if same else "validation and training differ",
                    "use held-out text for validation_path" if same else "")
    if f.corpus_path is None and f.init_model is None:
        yield Check("foundation.corpus_path", "warn", "no corpus: the smoke corpus proves the wiring, not capability",
                    "set foundation.corpus_path to real text")
    chosen = device if device and device != "auto" else f.device
    found = _presence_or_torch(engine, chosen)
    yield found
    yield from _bf16_check(spec, found)
    yield from cpu_bf16_check(spec, (found.data or {}).get("device") or chosen, _read_cpuinfo())
    yield world_size_check("foundation.nproc_per_node", f, chosen)
