"""Checkpoints of a sharded (FSDP2) loop that resume at any world size, sharded or not. Runs in the engine
environment.

A sharded model's checkpoint holds the same files as one process's (runtime/checkpoint.py): whole LoRA tensors in
`adapter.safetensors` and an `optimizer.pt` in torch's own index-keyed form, gathered from every rank's shard with
`torch.distributed.checkpoint.state_dict` (`get_model_state_dict` / `get_optimizer_state_dict`,
`full_state_dict=True`). So a checkpoint written by N sharded ranks resumes on M ranks, sharded or
DistributedDataParallel, or on one process, and one written by DDP or one process resumes sharded: restoring
hands the whole tensors to `set_model_state_dict` / `set_optimizer_state_dict`, which keep each rank's rows.

- `save(checkpoints, step, model, optimizer, meta, rank_rng, scaler)`: every rank calls it (the gathers are
  collectives); global rank 0 writes.
- `restore(path, model, optimizer, scaler, any_world_size)`: every rank calls it; rank 0 reads and hands the
  whole state to the others.
- `world_size_refusal(path, saved, world, any_world_size, sharded)`: the one rule for resuming at another world
  size, shared with the unsharded loops (runtime/loop.py): allowed when the loop's randomness does not depend
  on the world size (`any_world_size`: SFT with lora_dropout 0) and the run or the checkpoint is sharded
  (`sharded`; rng.pt's `sharded` marks a checkpoint written by sharded ranks), refused otherwise, naming the
  world size that wrote it. A DistributedDataParallel run with its own checkpoint keeps its world size, as
  before sharding existed.
- `rank_rng(ranks, rank)`: this rank's saved RNG, or rank 0's when the checkpoint had fewer ranks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from tt_engine_adapter.runtime import checkpoint, sharding
from tt_stagekit import distributed
from tt_stagekit.protocol import InvalidInput, log


def world_size_refusal(path: Path, saved: int, world: int, any_world_size: bool, sharded: bool) -> Optional[str]:
    if saved == world or (any_world_size and sharded):
        return None
    return (f"{path}: this checkpoint was written by {saved} training process(es) and this run has {world}; "
            f"LoRA dropout draws per-rank random numbers, so resume with hyperparameters.nproc_per_node × nnodes = "
            f"{saved}, or start a new run directory")


def written_sharded(path: Path) -> bool:
    return bool(checkpoint.load_plain(path / "rng.pt").get("sharded", False))


def rank_rng(ranks: list, rank: int) -> Any:
    return ranks[rank] if rank < len(ranks) else ranks[0]


def _names(model: Any, optimizer: Any) -> list[str]:
    """The optimizer's parameters' names, in the order torch numbers them in `optimizer.state_dict()`."""
    name_of = {id(p): name for name, p in model.named_parameters()}
    return [name_of[id(p)] for group in optimizer.param_groups for p in group["params"]]


def index_keyed(full: dict, names: list[str]) -> dict:
    """A name-keyed optimizer state dict (get_optimizer_state_dict's) as torch's own index-keyed one."""
    index = {name: i for i, name in enumerate(names)}
    return {"state": {index[name]: value for name, value in full["state"].items()},
            "param_groups": [{**group, "params": [index[name] for name in group["params"]]}
                             for group in full["param_groups"]]}


def name_keyed(saved: dict, names: list[str]) -> dict:
    """torch's index-keyed optimizer state dict keyed by parameter name (set_optimizer_state_dict's form)."""
    return {"state": {names[i]: value for i, value in saved["state"].items()},
            "param_groups": [{**group, "params": [names[i] for i in group["params"]]}
                             for group in saved["param_groups"]]}


def save(checkpoints: Any, step: int, model: Any, optimizer: Any, meta: dict, scaler: Any = None) -> None:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    weights = sharding.full_trainable_state(model)
    with distributed.collective("optimizer state gather for the checkpoint"):
        full = get_optimizer_state_dict(model, optimizer,
                                        options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    ranks = distributed.gather_objects(checkpoint.rng_state(), "RNG gather for the checkpoint")
    if distributed.context().is_main:
        checkpoint.save(checkpoints.folder, step, model, optimizer, meta, checkpoints.keep, ranks, scaler,
                        weights=weights, optimizer_state=index_keyed(full, _names(model, optimizer)), sharded=True)


def restore(path: Path, model: Any, optimizer: Any, scaler: Any = None, any_world_size: bool = False) -> None:
    from safetensors.torch import load_file
    from torch.distributed.checkpoint.state_dict import (StateDictOptions, set_model_state_dict,
                                                         set_optimizer_state_dict)

    ctx = distributed.context()
    payload: Any = None
    if ctx.is_main:
        saved = checkpoint.saved_world_size(path)
        refusal = world_size_refusal(path, saved, ctx.world_size, any_world_size, sharded=True)
        if refusal:
            payload = ("refused", refusal)
        else:
            scaled = checkpoint.load_plain(path / "scaler.pt") if (path / "scaler.pt").is_file() else None
            payload = ("ok", load_file(str(path / "adapter.safetensors")), checkpoint.load_plain(path / "optimizer.pt"),
                       checkpoint.load_plain(path / "rng.pt")["ranks"], scaled, saved)
    payload = distributed.broadcast_object(payload, "checkpoint hand-over")
    if payload[0] == "refused":
        raise InvalidInput(payload[1])
    _, weights, saved_optimizer, ranks, scaled, saved = payload
    missing = sorted(name for name, p in model.named_parameters() if p.requires_grad and name not in weights)
    if missing:
        raise InvalidInput(f"{path}: checkpoint lacks {missing[0]}; start a new run directory")
    options = StateDictOptions(full_state_dict=True, strict=False)
    with distributed.collective("checkpoint restore (sharding the saved state)"):
        set_model_state_dict(model, weights, options=options)
        set_optimizer_state_dict(model, optimizer, name_keyed(saved_optimizer, _names(model, optimizer)),
                                 options=StateDictOptions(full_state_dict=True))
    if scaler is not None and scaled:
        scaler.load_state_dict(scaled)
    checkpoint.set_rng(rank_rng(ranks, ctx.rank))
    if saved != ctx.world_size and ctx.is_main:
        log(f"{path.name} was written by {saved} process(es); resuming with {ctx.world_size} (sharded)")
