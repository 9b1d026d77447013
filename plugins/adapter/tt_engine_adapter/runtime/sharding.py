"""FSDP2 sharding of the LoRA model under torchrun (`hyperparameters.sharding` "fsdp"). Runs in the engine
environment.

Contract:

- `active(hp)`: sharding "fsdp" and more than one training process (on one process "fsdp" trains as "none");
- `shard(model, device, dtype, hp)`: `torch.distributed.fsdp.fully_shard` on every decoder layer (the model's
  `_no_split_modules`) and then on the root, LoRA already on; every weight, gradient and AdamW state is split
  in 1/world_size along dim 0 (torch.chunk), mixed precision (param dtype = the compute dtype, gradients reduced
  in float32) when the compute dtype is not float32, CPU offload with `fsdp_cpu_offload` on CUDA;
- `wrap(model, device)` / `no_sync(net, skip)`: what the loops call instead of DDP's: a sharded model is its own
  wrapper; on the micro-batches before the last of a step its gradient reduce-scatter is skipped;
- `held_bytes(model, optimizer)`: parameter + optimizer-state bytes this rank holds, the largest over the ranks
  (the train result's `train.sharded_bytes_per_rank`; a process holding everything reports the whole);
- `full_trainable_state(model)`: the LoRA tensors gathered whole from every rank's shard (a collective: every
  rank calls it), plain CPU tensors keyed as `model.state_dict()`; None for a model that is not sharded;
- `peak_host_bytes_per_node()`: the sum of the peak resident sets of one node's ranks (getrusage; an upper
  bound of the node's peak, as the ranks' peaks need not coincide), the largest over the nodes (a collective
  under torchrun; the process's own peak on one process): the train result's `train.peak_host_bytes_per_node`;
- `peak_device_bytes_per_rank(device)`: CUDA's peak allocation, the largest over the ranks (None off CUDA).
"""

from __future__ import annotations

import contextlib
from typing import Any, Optional

from tt_stagekit import distributed
from tt_stagekit.protocol import InvalidInput, log


def active(hp: Any) -> bool:
    return getattr(hp, "sharding", "none") == "fsdp" and distributed.context().enabled


def is_sharded(model: Any) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def mesh(device: str) -> Any:
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh("cuda" if str(device).startswith("cuda") else "cpu", (distributed.context().world_size,))


def decoder_layers(model: Any) -> list:
    """The repeated blocks each sharded on their own: the model's `_no_split_modules` classes (transformers')."""
    names: set[str] = set()
    for module in model.modules():
        names.update(getattr(module, "_no_split_modules", None) or ())
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if not layers:
        raise InvalidInput(f'hyperparameters.sharding "fsdp": {type(model).__name__} names no decoder layer class '
                           '(_no_split_modules) to shard by; use sharding "none"')
    return layers


def shard(model: Any, device: str, dtype: Any, hp: Any) -> Any:
    """fully_shard per decoder layer and on the root (the module docstring); returns the model, now sharded."""
    import torch
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard

    if dtype == torch.float16:
        raise InvalidInput('hyperparameters.precision: fp16 (what "auto" picks on this GPU) is not proven with '
                           'sharding "fsdp"; set precision "fp32" or sharding "none"')
    cuda = str(device).startswith("cuda")
    mixed = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32) if dtype != torch.float32 \
        else MixedPrecisionPolicy()
    offload = CPUOffloadPolicy() if hp.fsdp_cpu_offload and cuda else OffloadPolicy()
    options = {"mesh": mesh(device), "mp_policy": mixed, "offload_policy": offload}
    layers = decoder_layers(model)
    with distributed.collective("FSDP start-up"):
        for layer in layers:
            fully_shard(layer, **options)
        fully_shard(model, **options)
    log(f"sharded (FSDP2) over {distributed.context().world_size} processes: {len(layers)} decoder "
        f"layers and the root" + (", parameters offloaded to host memory" if offload != OffloadPolicy() else ""))
    return model


def wrap(model: Any, device: Any) -> Any:
    """The module the loop calls forward on: a sharded model itself, else DistributedDataParallel's wrapper."""
    return model if is_sharded(model) else distributed.wrap(model, device)


def no_sync(net: Any, skip: bool):
    """Skip the gradient reduction on all but the last micro-batch of an optimizer step."""
    if is_sharded(net):
        return _gradient_sync(net, not skip)
    return distributed.no_sync(net, skip)


@contextlib.contextmanager
def _gradient_sync(net: Any, sync: bool):
    net.set_requires_gradient_sync(sync)
    try:
        yield
    finally:
        net.set_requires_gradient_sync(True)


def _local(tensor: Any) -> Any:
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def held_bytes(model: Any, optimizer: Any) -> int:
    """Parameter + optimizer-state bytes held by this rank, the largest over the ranks."""
    import torch

    total = sum(_local(p).numel() * _local(p).element_size() for p in model.parameters())
    for state in optimizer.state.values():
        for value in state.values():
            if isinstance(value, torch.Tensor):
                total += _local(value).numel() * _local(value).element_size()
    return max(distributed.gather_objects(total, "memory figure gather"))


def full_trainable_state(model: Any) -> Optional[dict]:
    """The trainable (LoRA) tensors whole, on the CPU, on every rank (None when `model` is not sharded)."""
    if not is_sharded(model):
        return None
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    with distributed.collective("LoRA weights gather"):
        state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, ignore_frozen_params=True))
    return {name: tensor.detach().to("cpu").contiguous() for name, tensor in state.items()}


def own_peak_bytes() -> int:
    """This process image's peak resident set: VmHWM in /proc/self/status on Linux, whose ru_maxrss keeps the peak
    of the image before exec (a stage started by fork and exec from a large parent reported the parent's size:
    3.3 GB for a 0.8 GB stage under the test suite); ru_maxrss elsewhere."""
    import resource
    import sys

    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)


def peak_host_bytes_per_node() -> int:
    import os

    peak = own_peak_bytes()
    ctx = distributed.context()
    per_node = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    nodes: dict[int, int] = {}
    for rank, value in enumerate(distributed.gather_objects(peak, "host memory figure gather")):
        nodes[rank // per_node] = nodes.get(rank // per_node, 0) + value
    return max(nodes.values()) if ctx.enabled else peak


def peak_device_bytes_per_rank(device: str) -> Optional[int]:
    if not str(device).startswith("cuda"):
        return None
    import torch

    return max(distributed.gather_objects(int(torch.cuda.max_memory_allocated()), "device memory figure gather"))
