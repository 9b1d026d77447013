"""DistributedDataParallel plumbing for training stages under torchrun, shared by the engines.

World size 1 (no torchrun) is the plain single-process path: every helper
here is then a no-op and torch is never imported. Under torchrun (`RANK`,
`WORLD_SIZE`, `LOCAL_RANK` set):

- the process group is NCCL on CUDA (one device per local rank,
  `torch.cuda.set_device(LOCAL_RANK)`) and gloo on CPU, with a timeout on every
  collective (`TT_DIST_TIMEOUT_SECONDS`, default 600), so a rank that stops
  responding ends the run with an error instead of a hang; a rank whose
  launcher died is killed with it (Linux parent-death signal);
- global rank 0 writes checkpoints; the first rank of each node talks to that
  node's host (protocol.py);
- a failed collective becomes a `StageError` that says a peer died or timed out.

torch is imported inside the functions that need it: the engines bring it,
this distribution does not depend on it.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import re
import signal
import sys
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from tt_stagekit import signals
from tt_stagekit.contract import InvalidInput, StageError

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


def _device_type(device: Any) -> str:
    return getattr(device, "type", device)  # a torch.device or a device string


def _die_with_launcher() -> None:
    """torchrun starts ranks in their own sessions: make sure none outlives a killed launcher."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except Exception:
        return
    if not signals.host_alive() or os.getppid() == 1:  # the launcher died before prctl took effect
        os._exit(1)


def init(device: Any) -> Any:
    """Join the process group when started by torchrun.

    `device` is a torch.device or a device string; returns the device this rank computes on, of the
    same kind (`cuda:<local rank>` for a torch.device, `"cuda"` — now this rank's GPU — for a string).
    """
    global _CTX
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return device
    import torch
    import torch.distributed as dist

    _die_with_launcher()
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    kind = _device_type(device)
    if kind == "mps":
        raise InvalidInput("distributed training (nproc_per_node × nnodes > 1) runs on cuda (NCCL) or cpu (gloo), "
                           "not mps; choose the cpu or cuda device")
    if kind == "cuda":
        count = torch.cuda.device_count()
        if local_rank >= count:
            raise InvalidInput(f"local rank {local_rank} has no CUDA device (this node has {count}); "
                               "lower nproc_per_node to the number of GPUs")
        torch.cuda.set_device(local_rank)
        if isinstance(device, torch.device):
            device = torch.device("cuda", local_rank)
    backend = "nccl" if kind == "cuda" else "gloo"
    try:
        dist.init_process_group(backend=backend, timeout=datetime.timedelta(seconds=timeout_seconds()))
    except Exception as exc:
        raise StageError(f"rank {rank} of {world} could not join the {backend} process group: {exc}") from exc
    _CTX = Context(rank=rank, world_size=world, local_rank=local_rank, backend=backend)
    return device


def shutdown() -> None:
    """Leave the process group after a successful stage (every rank calls this).

    DistributedDataParallel wrappers sit in reference cycles that keep the group alive; collecting them
    first, and waiting at a barrier until every rank is done, means no rank tears its group down while
    another still has work in flight, and nothing of gloo is left for interpreter finalization (where
    it can abort the process: "terminate called without an active exception").
    """
    global _CTX
    if _CTX.enabled:
        import gc

        import torch.distributed as dist

        gc.collect()
        with contextlib.suppress(Exception):
            if dist.is_initialized():
                dist.barrier()
                dist.destroy_process_group()
    _CTX = Context()


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


def _first_line(exc: BaseException) -> str:
    """The error's first line without gloo's `[file.cc:line]` source prefix."""
    lines = str(exc).strip().splitlines()
    return re.sub(r"^\[[^\]]*\]\s*", "", lines[0]) if lines else ""


def all_reduce_sum(tensor: Any, what: str = "all-reduce") -> Any:
    """Sum a tensor over all ranks in place (no-op on one process)."""
    if _CTX.enabled:
        import torch.distributed as dist

        with collective(what):
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def broadcast_object(value: Any, what: str = "broadcast") -> Any:
    """Rank 0's value on every rank."""
    if not _CTX.enabled:
        return value
    import torch.distributed as dist

    box = [value if _CTX.is_main else None]
    with collective(what):
        dist.broadcast_object_list(box, src=0)
    return box[0]


def gather_objects(value: Any, what: str = "gather") -> list[Any]:
    """Every rank's value, in rank order, on every rank."""
    if not _CTX.enabled:
        return [value]
    import torch.distributed as dist

    out: list[Any] = [None] * _CTX.world_size
    with collective(what):
        dist.all_gather_object(out, value)
    return out


def on_cpu(value: Any) -> Any:
    """A nested dict/list/tuple (an optimizer state dict) with every tensor copied to the CPU, to hand it to
    other ranks."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, dict):
        return {k: on_cpu(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(on_cpu(v) for v in value)
    return value


def on_main(fn: Callable[[], Any], what: str) -> Any:
    """Run fn on rank 0 and hand its result (or its refusal) to every rank.

    A StageError/InvalidInput raised on rank 0 is raised on every rank, so all
    ranks exit with the same code instead of waiting for a rank that left.
    """
    outcome: Any = None
    if _CTX.is_main:
        try:
            outcome = ("ok", fn())
        except StageError as exc:
            if not _CTX.enabled:
                raise
            outcome = ("error", isinstance(exc, InvalidInput), str(exc))
    outcome = broadcast_object(outcome, what)
    if outcome[0] == "ok":
        return outcome[1]
    kind = InvalidInput if outcome[1] else StageError
    raise kind(outcome[2] if _CTX.is_main else f"(rank 0 refused) {outcome[2]}")


def wrap(model: Any, device: Any) -> Any:
    """DistributedDataParallel around model (the model itself on one process)."""
    if not _CTX.enabled:
        return model
    from torch.nn.parallel import DistributedDataParallel as DDP

    with collective("DistributedDataParallel start-up (parameter broadcast)"):
        return DDP(model, device_ids=[_CTX.local_rank] if _device_type(device) == "cuda" else None)


def no_sync(ddp_model: Any, skip: bool):
    """Skip the gradient all-reduce on all but the last micro-batch of an optimizer step."""
    if skip and _CTX.enabled:
        return ddp_model.no_sync()
    return contextlib.nullcontext()
