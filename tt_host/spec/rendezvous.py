"""The rendezvous a `tt run` reads from its environment, checked before the run is created.

Runs in the host. A block of the spec that inherits `DistributedSettings` with `rendezvous` "slurm" or "env"
takes nnodes, node_rank and rdzv_endpoint from this process's environment when its training stage starts
(`tt_stagekit.rendezvous`). `launch_errors(spec)` reads them now, with the same code, and validates the block
again with the values read (so the engine's own rules, such as a batch split across the world size, see the
real nnodes): each problem is one message naming the variable or field. `tt run` refuses (exit 2, nothing
created) when there is any. `tt validate` does not read the environment: a spec is written on one machine
and run on the cluster's nodes.
"""

from __future__ import annotations

from typing import Iterator

from pydantic import BaseModel, ValidationError

from tt_stagekit.rendezvous import RendezvousError, resolve

from tt_host.spec.schema import DistributedSettings

READ = ("nnodes", "node_rank", "rdzv_endpoint")


def _blocks(spec: BaseModel) -> Iterator[tuple[str, DistributedSettings]]:
    for name in type(spec).model_fields:
        block = getattr(spec, name, None)
        if isinstance(block, DistributedSettings) and block.rendezvous != "spec":
            yield name, block


def launch_errors(spec: BaseModel) -> list[str]:
    """Why the rendezvous this environment gives cannot start the spec's training stages ([] when it can, or
    when every block says "spec")."""
    errors: list[str] = []
    for name, block in _blocks(spec):
        try:
            read = resolve(block.model_dump())
        except RendezvousError as exc:
            errors.append(f"{name}.rendezvous: {exc}")
            continue
        values = {key: read[key] for key in READ}
        try:
            type(block).model_validate({**block.model_dump(exclude_unset=True), **values})
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in (name, *first["loc"]))
            shown = ", ".join(f"{key} {values[key]}" for key in READ)
            errors.append(f"{where}: {first['msg'].removeprefix('Value error, ')} (with {shown} read from the environment under rendezvous "
                          f"\"{block.rendezvous}\")")
    return errors
