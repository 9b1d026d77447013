"""Muon + AdamW rates derived from the model's width and size and the tokens per optimizer step.

The reference point is nanochat's: a depth-12 model (width 768) trained on 2^19 tokens per step, where
Muon's matrix rate is 0.02, AdamW's embedding rate 0.3 and head rate 0.008, and Muon's weight decay 0.28.
From there (the same rules nanochat follows, written from its description, not its code):

- AdamW rates scale with 1/sqrt(width / 768);
- above 2^19 tokens per step every rate scales with sqrt(tokens per step / 2^19) (the square-root batch
  rule); below it the rates stay at the reference (`batch_scale`: the factor never falls below
  formats.weights.BATCH_SCALE_FLOOR, 1). nanochat applies the square root downwards too ("not studied
  carefully"); measured here (docs/performance.md) it gives 0.00088 at 1,024 tokens per step and 0.0018
  at 4,096, where the best of a sweep was 0.02-0.05 (whole-text BPB 2.58 -> 2.09 at 1,024 and 2.13 -> 1.91 at 4,096, depth 2);
- Muon's weight decay scales with sqrt(tokens per step / 2^19) * (D_ref / D), D being the
  compute-optimal horizon of this model (12 tokens per scaling parameter: the decoder's matrices and
  the head), which keeps B / (lr * decay * D) constant across sizes;
- Muon's momentum warms from 0.85 to 0.95 (`runtime.schedule.muon_momentum`).
- AdamW's betas are nanochat's per group: 0.8/0.995 for the embedding, 0.8/0.96 for the head, 0.8/0.95
  for the norm weights (measured beside 0.8/0.95 everywhere: docs/performance.md).

So one set of defaults holds from depth 2 on a laptop (1,024-4,096 tokens per step) to depth 26 on a GPU
(2^19-2^20). `foundation.learning_rate`, when set, replaces the derived matrix rate and scales the AdamW
rates by the same factor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from tt_engine_foundation.formats.weights import BATCH_SCALE_FLOOR

REFERENCE_WIDTH = 768
REFERENCE_TOKENS_PER_STEP = 2**19
REFERENCE_DEPTH = 12
REFERENCE_VOCAB = 32768
TOKENS_PER_PARAMETER = 12
MATRIX_LR, EMBEDDING_LR, HEAD_LR, MUON_WEIGHT_DECAY = 0.02, 0.3, 0.008, 0.28


@dataclass(frozen=True)
class MuonRates:
    matrix_lr: float
    matrix_weight_decay: float
    embedding_lr: float
    head_lr: float
    norm_lr: float
    adam_betas: tuple[float, float] = (0.8, 0.95)  # the norm weights
    embedding_betas: tuple[float, float] = (0.8, 0.995)
    head_betas: tuple[float, float] = (0.8, 0.96)
    momentum_start: float = 0.85
    momentum_end: float = 0.95


def scaling_parameters(width: int, depth: int, intermediate: int, vocab: int) -> int:
    """Decoder matrices (q, k, v, o; gate, up, down) plus the head."""
    return depth * (4 * width * width + 3 * width * intermediate) + vocab * width


def _intermediate(width: int) -> int:
    return int(math.ceil(8 * width / 3 / 64) * 64)


def batch_scale(tokens_per_step: int) -> float:
    """Every rate's factor for `tokens_per_step`: sqrt(tokens / 2^19), never below BATCH_SCALE_FLOOR."""
    return max(BATCH_SCALE_FLOOR, math.sqrt(tokens_per_step / REFERENCE_TOKENS_PER_STEP))


def muon_rates(width: int, depth: int, vocab: int, tokens_per_step: int,
               learning_rate: Optional[float] = None) -> MuonRates:
    batch = batch_scale(tokens_per_step)
    decay_batch = math.sqrt(tokens_per_step / REFERENCE_TOKENS_PER_STEP)
    adam_width = math.sqrt(REFERENCE_WIDTH / width)
    horizon = TOKENS_PER_PARAMETER * scaling_parameters(width, depth, _intermediate(width), vocab)
    reference_horizon = TOKENS_PER_PARAMETER * scaling_parameters(
        REFERENCE_WIDTH, REFERENCE_DEPTH, _intermediate(REFERENCE_WIDTH), REFERENCE_VOCAB)
    matrix_lr = MATRIX_LR * batch
    scale = 1.0 if learning_rate is None else learning_rate / matrix_lr
    head_lr = HEAD_LR * adam_width * batch * scale
    return MuonRates(
        matrix_lr=matrix_lr * scale,
        matrix_weight_decay=MUON_WEIGHT_DECAY * decay_batch * reference_horizon / horizon,
        embedding_lr=EMBEDDING_LR * adam_width * batch * scale,
        head_lr=head_lr,
        norm_lr=head_lr,
    )
