"""Preflight checks that `tt doctor` runs for a spec: the device as torch in the engine's environment sees
it, the torchrun world size against the devices here, and the disk space, writability and filesystems of the
folders a run will write.

The device probe is a short subprocess of the engine environment's python
(`python -P -m tt_stagekit.probe DEVICE`, run from a private folder), so the host never imports torch and the
answer is the one the stages will get. The disk checks measure free space at
the nearest existing folder of each path against the engine's estimate
(`Engine.disk_needs`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional

from tt_host.engine import Check, DiskNeed, Engine
from tt_host.engines.isolation import private_folder, python_command, python_env
from tt_stagekit.gpus import nvidia_gpus

PROBE_TIMEOUT_SECONDS = 180.0


def existing_parent(path: Path) -> Path:
    """The path itself when it exists, else its nearest existing parent folder."""
    probe = Path(path).absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return probe


def _probe(python: Path, device: str) -> dict[str, Any]:
    with private_folder("tt-probe-") as folder:  # -P and a private folder: nothing beside the spec is imported
        proc = subprocess.run(python_command(python, ["-m", "tt_stagekit.probe", device]), capture_output=True,
                              text=True, timeout=PROBE_TIMEOUT_SECONDS, env=python_env(PYTHONUNBUFFERED="1"),
                              cwd=folder)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"the probe exited {proc.returncode}: {tail[0]}")
    return json.loads(lines[-1])


def _describe(info: dict[str, Any]) -> str:
    parts = [f"torch {info.get('torch')} (CUDA build {info.get('torch_cuda') or 'none: CPU-only torch'})"]
    if info.get("gpu"):
        parts.append(f"GPU {info['gpu']} × {info.get('device_count', 1)} (compute {info.get('capability')}, "
                     f"{info.get('memory_gb')} GB, bf16 {'yes' if info.get('bf16') else 'no'})")
    if "driver_version" in info or "driver_cuda" in info:
        parts.append(f"NVIDIA driver {info.get('driver_version') or 'not found'}"
                     + (f" (supports CUDA {info['driver_cuda']})" if info.get("driver_cuda") else ""))
    return "; ".join(parts)


def environment_torch(engine: Engine, path: Path, info: dict[str, Any]) -> str:
    """The environment's torch build as recorded when it was built (tt_host.engines.torch_build), and a note when
    it is a CUDA build on a machine whose torch sees no CUDA device (docs/host.md "The torch build")."""
    from tt_host.engines import envs
    from tt_host.engines.torch_build import summary

    record = envs.torch_record(engine, path)
    if not record:
        return ""
    unused = (record.get("build") == "cuda" and not info.get("cuda_available")
              and " (no CUDA device here: its GPU libraries go unused; docs/host.md \"The torch build\")")
    return f"; environment: {summary(record)}{unused or ''}"


def torch_device_check(engine: Engine, device: str, name: str) -> Check:
    """Whether torch in the engine's environment can compute on `device` (cpu, cuda, mps or auto)."""
    from tt_host.engines import envs

    try:
        path = envs.env_dir(engine)
    except envs.EnvBuildError as exc:
        return Check(name, "fail", str(exc), "reinstall the engine plugin")
    if not envs.is_ready(path):
        return Check(name, "warn", f"the {engine.name} environment is not prepared, so whether torch can use "
                     f"device {device!r} was not checked", f"run `tt engines prepare {engine.name}`, then `tt doctor` again")
    try:
        info = _probe(envs.env_python(path), device)
    except (OSError, subprocess.SubprocessError, RuntimeError, json.JSONDecodeError) as exc:
        return Check(name, "fail", f"could not ask torch in {path} about device {device!r}: {exc}",
                     f"rebuild the environment: `tt engines prepare {engine.name}`")
    detail = _describe(info) + environment_torch(engine, path, info)
    if device == "cuda" and not info.get("cuda_available"):
        wanted = info.get("torch_cuda")
        return Check(name, "fail", f"device 'cuda' asked for, but torch sees no usable CUDA device: {detail}",
                     (f"install an NVIDIA driver that supports CUDA {wanted} or newer" if wanted else
                      "the environment has a CPU-only torch") + ", or set the spec's device to cpu", info)
    if not info.get("works"):
        return Check(name, "fail", f"torch cannot compute on {info.get('device')}: {info.get('error')}; {detail}",
                     "fix the driver, or choose another device", info)
    if device == "auto" and info.get("device") == "cpu" and info.get("driver_version"):
        return Check(name, "warn", f"auto picks cpu although an NVIDIA driver is installed: {detail}",
                     "the driver is probably too old for this torch; update it, or set device cpu to silence this",
                     info)
    return Check(name, "ok", f"{info.get('device')}: {detail}", "", info)


def world_size_check(name: str, settings: Any, device: str) -> Check:
    """A spec block's torchrun settings (`tt_host.spec.schema.DistributedSettings`) against this machine, for
    `device` (the one the run will use): on CUDA one GPU per process, counted by nvidia-smi (never torch), a
    failure when there are too few; on CPU any count with gloo, a warning above the cores; mps refused above
    one process. `name` is the check's name, the dotted nproc_per_node field (`<block>.nproc_per_node`)."""
    nproc, nnodes, world = settings.nproc_per_node, settings.nnodes, settings.world_size
    where = f"{nproc} process(es) per node × {nnodes} node(s) = world size {world}"
    gpus = nvidia_gpus() if device in ("cuda", "auto") else None
    count = None if gpus is None else len(gpus)
    if device == "cuda" or (device == "auto" and count):
        if count is None:
            return Check(name, "fail" if device == "cuda" else "warn", f"{where}; nvidia-smi lists no GPU",
                         "install the NVIDIA driver or use device cpu (gloo)")
        if nproc > count:
            return Check(name, "fail", f"{where}, but this node has {count} CUDA device(s) (nvidia-smi)",
                         f"set {name} to at most {count}")
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


def _gb(value: int) -> str:
    return f"{value / 1e9:.2f} GB"


def disk_checks(needs: Iterable[DiskNeed], run_folder: Path) -> Iterator[Check]:
    """Free space, writability and (for backups) a separate filesystem, for each folder a run writes."""
    needs = list(needs)
    run_probe = existing_parent(run_folder)
    by_folder: dict[Path, list[DiskNeed]] = {}
    for need in needs:
        by_folder.setdefault(Path(need.folder) if need.folder is not None else Path(run_folder), []).append(need)
    for folder, group in by_folder.items():
        probe = existing_parent(folder)
        total = sum(n.bytes for n in group)
        free = shutil.disk_usage(probe).free
        what = ", ".join(f"{n.detail or n.name} {_gb(n.bytes)}" for n in group)
        data = {"folder": str(folder), "measured_at": str(probe), "free_bytes": free, "need_bytes": total,
                "parts": {n.name: n.bytes for n in group}}
        label = "run folder" if folder == Path(run_folder) else group[0].name
        detail = f"{folder}: need about {_gb(total)} ({what}); {_gb(free)} free (measured at {probe})"
        yield Check(f"disk: {label}", "ok" if free >= total else "fail", detail,
                    "" if free >= total else "free disk space, choose another folder, or lower the sizes named",
                    data)
        if folder == Path(run_folder):
            continue
        writable = os.access(probe, os.W_OK | os.X_OK)
        name = group[0].name
        yield Check(f"{name} writable", "ok" if writable else "fail",
                    f"{folder} ({'exists' if probe == folder.absolute() else f'will be created in {probe}'}; "
                    f"writable: {writable})", "" if writable else f"make {probe} writable or choose another folder",
                    {"folder": str(folder), "measured_at": str(probe), "writable": writable})
        if any(n.separate_disk for n in group):
            same = probe.stat().st_dev == run_probe.stat().st_dev
            yield Check(f"{name} disk", "warn" if same else "ok",
                        f"{folder} is on {'the same' if same else 'another'} filesystem as the run folder {run_folder}",
                        "put the backup on another disk: a disk failure would take both copies" if same else "",
                        {"folder": str(folder), "run_folder": str(run_folder), "same_filesystem": same})


def engine_disk_checks(engine: Engine, spec: Any, run_folder: Path) -> Iterator[Check]:
    if engine.disk_needs is None or spec is None:
        return
    try:
        needs = list(engine.disk_needs(spec))
    except Exception as exc:  # an engine's estimate must not crash tt doctor
        yield Check(f"{engine.name} disk estimate", "fail", f"the engine's disk estimate raised {exc!r}",
                    "report this to the engine's authors")
        return
    yield from disk_checks(needs, run_folder)


def default_run_folder(spec_path: Path, resume: Optional[Path]) -> Path:
    return Path(resume).absolute() if resume is not None else Path(spec_path).absolute().parent / ".tuned-tensor" / "runs"
