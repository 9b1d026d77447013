"""DistributedDataParallel plumbing for LoRA training under torchrun.

World size 1 (no torchrun) is the plain single-process path: every helper is
then a no-op. Under torchrun (`RANK`, `WORLD_SIZE`, `LOCAL_RANK` set) the
process group is NCCL on CUDA (`torch.cuda.set_device(LOCAL_RANK)`, so the
engine's `"cuda"` device is this rank's GPU) and gloo on CPU, with a timeout on
every collective (`TT_DIST_TIMEOUT_SECONDS`, default 600); a failed collective
becomes a `StageError` saying a peer died or timed out; a rank dies with its
launcher (Linux parent-death signal). Global rank 0 writes checkpoints; the
first rank of each node speaks to its host (protocol.py).

Each micro-batch of the single-process schedule is split across ranks
(`rows[rank::world]`), and every rank scales its loss by the world size over
the step's global supervised-token count, so DDP's gradient average gives the
single-process update.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import re
import signal
import sys
from dataclasses import dataclass
from typing import Any, Iterator

from tt_engine_adapter.runtime.protocol import InputError, StageError

DEFAULT_TIMEOUT_SECONDS = 600.0


@dataclass(frozen=True)
class Context:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    backend: str = ""

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


_CTX = Context()


def context() -> Context:
    return _CTX


def timeout_seconds() -> float:
    try:
        return max(1.0, float(os.environ.get("TT_DIST_TIMEOUT_SECONDS", DEFAULT_TIMEOUT_SECONDS)))
    except ValueError:
        return DEFAULT_TIMEOUT_SECONDS


def _die_with_launcher() -> None:
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except Exception:
        return
    if os.getppid() == 1:
        os._exit(1)


def init(device: str) -> str:
    """Join the process group when started by torchrun; returns the device string to keep using."""
    global _CTX
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return device
    import torch
    import torch.distributed as dist

    _die_with_launcher()
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if device == "mps":
        raise InputError("hyperparameters.nproc_per_node × nnodes > 1 runs on cuda (NCCL) or cpu (gloo), not mps")
    if device == "cuda":
        if local_rank >= torch.cuda.device_count():
            raise InputError(f"local rank {local_rank} has no CUDA device (this node has {torch.cuda.device_count()}); "
                             "lower hyperparameters.nproc_per_node")
        torch.cuda.set_device(local_rank)
    backend = "nccl" if device == "cuda" else "gloo"
    try:
        dist.init_process_group(backend=backend, timeout=datetime.timedelta(seconds=timeout_seconds()))
    except Exception as exc:
        raise StageError(f"rank {rank} of {world} could not join the {backend} process group: {exc}") from exc
    _CTX = Context(rank=rank, world_size=world, local_rank=local_rank, backend=backend)
    return device


def shutdown() -> None:
    global _CTX
    if _CTX.enabled:
        import torch.distributed as dist

        with contextlib.suppress(Exception):
            dist.destroy_process_group()
    _CTX = Context()


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return re.sub(r"^\[[^\]]*\]\s*", "", lines[0]) if lines else ""


@contextlib.contextmanager
def collective(what: str) -> Iterator[None]:
    """Turn a failed or timed-out collective into a clear StageError."""
    try:
        yield
    except (StageError, KeyboardInterrupt):
        raise
    except Exception as exc:
        if not _CTX.enabled or "out of memory" in str(exc).lower():
            raise  # a local failure (e.g. CUDA OOM) keeps its own message
        raise StageError(
            f"rank {_CTX.rank} of {_CTX.world_size}: {what} failed: another rank of the distributed run died or did "
            f"not answer within {timeout_seconds():.0f} s (TT_DIST_TIMEOUT_SECONDS) ({type(exc).__name__}: "
            f"{_first_line(exc)}); resume with --resume from the last checkpoint"
        ) from exc


def all_reduce_sum(tensor, what: str):
    if _CTX.enabled:
        import torch.distributed as dist

        with collective(what):
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def gather_objects(value: Any, what: str) -> list[Any]:
    if not _CTX.enabled:
        return [value]
    import torch.distributed as dist

    out: list[Any] = [None] * _CTX.world_size
    with collective(what):
        dist.all_gather_object(out, value)
    return out


def broadcast_object(value: Any, what: str) -> Any:
    if not _CTX.enabled:
        return value
    import torch.distributed as dist

    box = [value if _CTX.is_main else None]
    with collective(what):
        dist.broadcast_object_list(box, src=0)
    return box[0]


def wrap(model: Any, device: str) -> Any:
    if not _CTX.enabled:
        return model
    from torch.nn.parallel import DistributedDataParallel as DDP

    with collective("DistributedDataParallel start-up"):
        return DDP(model, device_ids=[_CTX.local_rank] if device == "cuda" else None)


def no_sync(ddp_model: Any, skip: bool):
    if skip and _CTX.enabled:
        return ddp_model.no_sync()
    return contextlib.nullcontext()
