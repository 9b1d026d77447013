"""SFT replay: rows of the pretraining token cache mixed into every SFT step (`foundation.finetune_corpus_rows`).

Fine-tuning a small model on a few dozen chat rows pulls it away from what pretraining taught: it can
answer every prompt with one of the few answers it was tuned on. Replay keeps the pretraining
objective in each step: step s adds `finetune_corpus_rows` rows of the run's token cache, the rows
pretraining trained on (BOS-aligned packed rows or stream windows, as `foundation.packing` built
them), and the step's loss is the chat loss (the mean over supervised assistant tokens, unchanged)
plus the corpus loss (the mean next-token loss over those rows' tokens, padding ignored).

The rows come in their own seeded order (`seed + REPLAY_SEED_OFFSET`, so not pretraining's first
rows again): row i of step s is sample s·n + i of it, a pure function of the seed and the step, so a
resumed SFT draws the same rows. Under torchrun every rank takes rows `rank::world_size` of the
step's corpus rows and scales its sum like the chat loss (sft._rank_loss), so the update is the
single-process one. With 0 rows (the default) nothing here runs and SFT is unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch

from tt_engine_foundation.runtime import token_cache, torchsetup
from tt_engine_foundation.runtime.config import FoundationSettings, Layout
from tt_engine_foundation.runtime.loss import cross_entropy
from tt_engine_foundation.runtime.packing import PAD_TARGET, inputs_and_targets

REPLAY_SEED_OFFSET = 7919  # the replay order's seed is foundation.seed plus this


@dataclass
class Replay:
    """The corpus rows SFT mixes in: `rows` per step from `sampler` (PackedRows or Windows)."""

    sampler: Any
    rows: int
    token_cache_sha256: str

    def batch(self, step: int) -> torch.Tensor:
        """Step `step`'s corpus rows, (rows, sequence_length + 1) ids, PAD_TARGET where a packed row is padding."""
        return torch.from_numpy(self.sampler.batch(step * self.rows, self.rows))

    def loss(self, model, step: int, pad_id: int, device, autocast_dtype, rank: int = 0, world: int = 1) -> torch.Tensor:
        """This rank's share of step `step`'s corpus loss, scaled so that the sum over ranks (DDP's gradient
        average times the world size) is the mean over every corpus target token of the step."""
        rows = self.batch(step)
        inputs, targets = inputs_and_targets(rows, pad_id)
        counted = int((targets != PAD_TARGET).sum())
        mine = slice(rank, None, world)
        x, y = inputs[mine], targets[mine]
        if len(x) == 0:  # more ranks than rows: take part in the all-reduce with a zero-weight row
            x, y = inputs[:1], torch.full_like(targets[:1], PAD_TARGET)
        with torchsetup.autocast(autocast_dtype, device):
            logits = model(x.to(device))
        here = int((y != PAD_TARGET).sum())
        if here == 0:  # nothing to score on this rank: a zero that still reaches every weight (DDP's all-reduce)
            return logits.float().sum() * 0.0
        flat = logits.reshape(-1, logits.size(-1)).float()
        mean = cross_entropy(flat, y.reshape(-1).to(device), PAD_TARGET)  # over this rank's target tokens
        return mean * (here * world / counted)


def open_replay(cfg: FoundationSettings, layout: Layout, bos_id: int, pad_id: int) -> Optional[Replay]:
    """The run's token cache as SFT replay rows, or None when `finetune_corpus_rows` is 0."""
    if cfg.finetune_corpus_rows == 0:
        return None
    tokens, table, manifest = token_cache.open_training_data(cfg, layout)
    seed = cfg.seed + REPLAY_SEED_OFFSET
    if table is not None:
        from tt_engine_foundation.runtime.packing import PackedRows

        sampler = PackedRows(tokens, table, cfg.sequence_length + 1, bos_id, pad_id, seed)
    else:
        sampler = token_cache.Windows(tokens, cfg.sequence_length, seed)
    return Replay(sampler, cfg.finetune_corpus_rows, manifest["file"]["sha256"])
