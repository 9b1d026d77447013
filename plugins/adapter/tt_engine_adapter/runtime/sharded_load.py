"""Loading the base for sharded training: built on the meta device, sharded, and each rank reading only its rows
of every weight from the memory-mapped safetensors files. Runs in the engine environment (under torchrun).

`load(path, device, dtype, hp)` returns the PEFT LoRA model, sharded (runtime/sharding.py), equal to what one
process gets from `from_pretrained` + `get_peft_model` with the same seed:

1. the model is built from its config with its parameters on the meta device (no memory) and its buffers real
   (accelerate's `init_empty_weights(include_buffers=False)`): buffers such as the rotary tables are computed
   there, not read from the weights files (non-persistent); a tied output head is tied to the embeddings;
2. LoRA is put on with stand-in base weights that hold no memory (a 0-stride CPU view, so PEFT creates and
   initialises the LoRA tensors on the CPU, drawing the same random numbers as one process), which are put
   back on the meta device after; the LoRA tensors' values are kept;
3. `fully_shard`, then `to_empty` gives every rank uninitialised storage for its shard only, filled with the
   rows [rank × ceil(n / world), …) of each base weight (safetensors' `get_slice`: only those rows are read),
   the kept LoRA values' rows, and the buffers as built in step 1 (`to_empty` leaves them uninitialised too).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from tt_stagekit import distributed
from tt_stagekit.protocol import StageError


def weight_files(folder: Path) -> dict[str, Path]:
    """Weight name -> the safetensors file holding it (a sharded checkpoint's index, or model.safetensors)."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        return {name: folder / file for name, file in json.loads(index.read_text())["weight_map"].items()}
    single = folder / "model.safetensors"
    if not single.is_file():
        raise StageError(f"base_model: {folder} has no model.safetensors (sharded loading reads safetensors "
                         'only); use hyperparameters.sharding "none"')
    from safetensors import safe_open

    with safe_open(str(single), framework="pt") as handle:
        return {name: single for name in handle.keys()}


def checkpoint_name(parameter: str) -> str:
    """A PEFT model's base parameter name as the weights files spell it."""
    name = parameter.removeprefix("base_model.model.")
    return name.replace(".base_layer.", ".")


def rows_of(n: int) -> tuple[int, int]:
    """This rank's rows [start, end) of a dim-0 size n, as fully_shard splits it (torch.chunk)."""
    ctx = distributed.context()
    chunk = -(-n // ctx.world_size)
    start = min(ctx.rank * chunk, n)
    return start, min(start + chunk, n)


def fill_shard(parameter: Any, read_rows: Callable[[int, int], Any], name: str) -> None:
    """Copy this rank's rows of a whole tensor (read_rows(start, end)) into the parameter's local shard."""
    import torch

    if not hasattr(parameter, "to_local"):  # a parameter fully_shard left whole (none today): all its rows
        with torch.no_grad():
            parameter.copy_(read_rows(0, parameter.shape[0]) if parameter.ndim else read_rows(0, 0))
        return
    local = parameter.to_local()
    if local.ndim == 0:
        with torch.no_grad():
            local.copy_(read_rows(0, 0))
        return
    start, end = rows_of(parameter.shape[0])
    if end - start != local.shape[0]:
        raise StageError(f"{name}: this rank's shard has {local.shape[0]} rows, expected {end - start}; "
                         'use hyperparameters.sharding "none"')
    if end > start:
        with torch.no_grad():
            local.copy_(read_rows(start, end))


def build(path: str, dtype: Any, hp: Any) -> tuple[Any, dict, dict]:
    """Steps 1 and 2 (no process group): the PEFT model with its base on the meta device, the LoRA tensors' and
    the buffers' values."""
    import torch
    from accelerate import init_empty_weights
    from transformers import AutoConfig, AutoModelForCausalLM

    from tt_engine_adapter.runtime import memory
    from tt_engine_adapter.runtime.train import wrap_lora

    try:
        config = AutoConfig.from_pretrained(path, local_files_only=True)
        with init_empty_weights(include_buffers=False):
            model = AutoModelForCausalLM.from_config(config, dtype=dtype)
        model.tie_weights()  # from_config leaves a tied head its own parameter; one weight, as from_pretrained
    except Exception as exc:
        raise StageError(f"base_model: cannot build the model from {path}: {type(exc).__name__}: {exc}") from None
    model = memory.prepare_base(model, hp)
    _on(model, lambda p: torch.nn.Parameter(torch.empty((), dtype=p.dtype).expand(p.shape), requires_grad=False))
    model = wrap_lora(model, hp)
    _on(model, lambda p: torch.nn.Parameter(torch.empty(p.shape, dtype=p.dtype, device="meta"), requires_grad=False),
        only=lambda p: not p.requires_grad)
    lora = {name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad}
    buffers = {name: b.detach().clone() for name, b in model.named_buffers()}
    return model, lora, buffers


def load(path: str, device: str, dtype: Any, hp: Any) -> Any:
    import torch
    from safetensors import safe_open

    from tt_engine_adapter.runtime import sharding

    folder = Path(path)
    files = weight_files(folder)
    model, lora, buffers = build(path, dtype, hp)
    model = sharding.shard(model, device, dtype, hp)
    model.to_empty(device=device)
    handles: dict[Path, Any] = {}
    try:
        for name, parameter in model.named_parameters():
            if name in lora:
                fill_shard(parameter, lambda s, e, t=lora[name]: t[s:e] if t.ndim else t, name)
                continue
            key = checkpoint_name(name)
            if key not in files:
                raise StageError(f"base_model: {key} (parameter {name}) is not in {folder}'s safetensors files; "
                                 'use hyperparameters.sharding "none"')
            if files[key] not in handles:
                handles[files[key]] = safe_open(str(files[key]), framework="pt")
            sliced = handles[files[key]].get_slice(key)
            fill_shard(parameter, lambda s, e, v=sliced: v[s:e] if v.get_shape() else v[...], name)
    finally:
        handles.clear()
    with torch.no_grad():
        for name, buffer in model.named_buffers():
            buffer.copy_(buffers[name])
    return model


def _on(model: Any, make: Callable[[Any], Any], only: Callable[[Any], bool] = lambda p: True) -> None:
    """Replace every parameter (for which `only`) by `make(parameter)`, a tied one once (ties kept)."""
    made: dict[int, Any] = {}
    replaced = []  # the old parameters stay alive until the end, so no id is reused
    for module in model.modules():
        for key, parameter in list(module._parameters.items()):
            if parameter is None or not only(parameter):
                continue
            if id(parameter) not in made:
                made[id(parameter)] = make(parameter)
                replaced.append(parameter)
            module._parameters[key] = made[id(parameter)]
