"""Which samples of a global batch each rank computes under torchrun.

The global batch is `batch_size × gradient_accumulation_steps` sequences
whatever the world size; each rank takes contiguous slices of the
single-process order (splitting `batch_size` when it divides, else the
accumulation steps), so results do not depend on how many processes computed
them. The process-group plumbing itself is `tt_stagekit.distributed`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from tt_stagekit.protocol import InvalidInput


@dataclass(frozen=True)
class ShardPlan:
    micro_batch: int  # sequences per forward on this rank
    micro_steps: int  # forwards per optimizer step on this rank
    batch: int  # the configured batch_size
    rank: int

    def start(self, step_start: int, micro: int) -> int:
        """First global sample index of this rank's `micro`-th forward in the step starting at step_start."""
        if self.micro_batch < self.batch:  # batch_size split across ranks, accumulation kept
            return step_start + micro * self.batch + self.rank * self.micro_batch
        return step_start + (self.rank * self.micro_steps + micro) * self.batch  # accumulation split


def split_error(batch: int, accum: int, world: int, prefix: str = "foundation.") -> Optional[str]:
    if world <= 1 or batch % world == 0 or accum % world == 0:
        return None
    return (f"{prefix}batch_size ({batch}) × {prefix}gradient_accumulation_steps ({accum}) sequences per optimizer "
            f"step cannot be split evenly across {world} processes (nproc_per_node × nnodes): make "
            f"{prefix}batch_size or {prefix}gradient_accumulation_steps a multiple of {world}")


def shard_plan(batch: int, accum: int, world: int, rank: int) -> ShardPlan:
    error = split_error(batch, accum, world)
    if error:
        raise InvalidInput(error)
    if batch % world == 0:
        return ShardPlan(batch // world, accum, batch, rank)
    return ShardPlan(batch, accum // world, batch, rank)
