"""BOS-aligned document packing: every training row starts at a `<|bos|>`, no document text is lost.

The token cache is a stream of BOS-prefixed documents (a literal `<|bos|>` in text is ordinary text, so
the id marks document starts only). `plan` cuts it into rows of `row_tokens` (sequence_length + 1):

1. a document longer than a row is split into chunks: the first is its first `row_tokens` tokens (its
   own BOS leads), each later chunk is a BOS followed by the next `row_tokens - 1` tokens;
2. chunks are packed best-fit decreasing: the longest first, each into the open row with the least room
   that still holds it, else into a new row; ties go to the earliest chunk and row, so the plan is a
   pure function of the token cache and the row length;
3. room left at a row's end is padding (input `<|pad|>`, target ignored), never cropped text.

So a row never continues across a document boundary without a BOS, and concatenating every chunk (minus
the BOSes step 1 added) gives back the token cache. The plan is an int64 table, one line per chunk:
(row, source start, source length, BOS added), written beside the cache and hashed in its manifest.

Sampling (`PackedRows`): every row once per epoch, in a per-epoch permutation of the seed. With
`start_share` s > 0, the rows that begin at a document's own first token ("start rows"; on a corpus of
long documents most rows are later chunks) are repeated so that they make up s of each epoch: a text's
beginning is seen more often, the rest of it no less (`epoch_order`).
"""

from __future__ import annotations

import bisect
import math
from typing import Optional

import numpy as np
from tt_stagekit.protocol import StageError

PAD_TARGET = -1  # in a packed row: padding (its input is the pad id, its target ignored)


def document_starts(tokens: np.ndarray, bos_id: int) -> np.ndarray:
    starts = np.flatnonzero(np.asarray(tokens) == bos_id)
    if len(tokens) and (len(starts) == 0 or starts[0] != 0):
        raise StageError("the token cache does not start with <|bos|>; rebuild it (delete pretrain/recovery/pretrain-tokens.*)")
    return starts


def _chunks(starts: np.ndarray, total: int, row_tokens: int) -> list[tuple[int, int, int]]:
    ends = np.append(starts[1:], total)
    out: list[tuple[int, int, int]] = []
    for start, end in zip(starts.tolist(), ends.tolist()):
        take = min(end - start, row_tokens)
        out.append((start, take, 0))
        pos = start + take
        while pos < end:
            take = min(end - pos, row_tokens - 1)
            out.append((pos, take, 1))
            pos += take
    return out


def plan(tokens: np.ndarray, bos_id: int, row_tokens: int) -> np.ndarray:
    """(chunks, 4) int64: row, source start, source length, BOS added (0/1); rows in order."""
    if row_tokens < 2:
        raise ValueError("row_tokens must be at least 2")
    chunks = _chunks(document_starts(tokens, bos_id), len(tokens), row_tokens)
    order = sorted(range(len(chunks)), key=lambda i: (-(chunks[i][1] + chunks[i][2]), i))
    room: list[tuple[int, int]] = []  # (room left, row) of rows not yet full, sorted
    placed = np.empty((len(chunks), 4), dtype=np.int64)
    rows = 0
    for i in order:
        start, length, added = chunks[i]
        size = length + added
        at = bisect.bisect_left(room, (size, -1))
        if at < len(room):
            left, row = room.pop(at)
        else:
            left, row = row_tokens, rows
            rows += 1
        placed[i] = (row, start, length, added)
        if left - size > 0:
            bisect.insort(room, (left - size, row))
    # rows in order, chunks within a row in placement order (longest first)
    rank = np.empty(len(chunks), dtype=np.int64)
    rank[np.asarray(order, dtype=np.int64)] = np.arange(len(chunks))
    return placed[np.lexsort((rank, placed[:, 0]))] if len(chunks) else placed


def summary(table: np.ndarray, row_tokens: int) -> dict:
    rows = int(table[:, 0].max()) + 1 if len(table) else 0
    filled = int(table[:, 2].sum() + table[:, 3].sum())
    return {"kind": "bos_best_fit", "row_tokens": row_tokens, "rows": rows, "chunks": len(table),
            "added_bos": int(table[:, 3].sum()), "fill": filled / max(1, rows * row_tokens)}


def start_rows(table: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """Indices of the rows whose first chunk is a document's own beginning (its BOS not added)."""
    return np.flatnonzero(table[bounds[:-1], 3] == 0)


def epoch_order(rows: int, starts: np.ndarray, start_share: float, seed: int) -> np.ndarray:
    """The rows one epoch visits: each once, plus repeats of `starts` so they are `start_share` of the epoch.

    Never below each row once (a share the corpus already exceeds adds nothing). The repeats are whole
    copies of every start row, then a seeded choice of start rows for the remainder, so the order is a pure
    function of its arguments.
    """
    every = np.arange(rows, dtype=np.int64)
    others = rows - len(starts)
    if start_share <= 0 or len(starts) == 0:
        return every
    wanted = int(math.ceil(start_share * others / (1.0 - start_share))) if others else len(starts)
    extra = wanted - len(starts)
    if extra <= 0:
        return every
    whole, part = divmod(extra, len(starts))
    chosen = np.random.default_rng([seed, 0x5747]).permutation(starts)[:part]
    return np.concatenate([every] + [starts] * whole + [np.sort(chosen)])


class PackedRows:
    """Deterministic sample order over packed rows, reshuffled per epoch from the seed (as `Windows`)."""

    def __init__(self, tokens: np.ndarray, table: np.ndarray, row_tokens: int, bos_id: int, pad_id: int,
                 seed: int, start_share: float = 0.0) -> None:
        self.tokens, self.row_tokens, self.bos_id, self.pad_id, self.seed = tokens, row_tokens, bos_id, pad_id, seed
        bounds = np.searchsorted(table[:, 0], np.arange(int(table[:, 0].max()) + 2 if len(table) else 1))
        self.table, self.bounds = table, bounds
        self.count = len(bounds) - 1  # distinct rows
        if self.count < 1:
            raise StageError("the token cache holds no document to train on")
        self.starts = start_rows(table, bounds)
        self.order = epoch_order(self.count, self.starts, start_share, seed)
        self.epoch_rows = len(self.order)  # samples per epoch
        filled = np.add.reduceat(table[:, 2] + table[:, 3], bounds[:-1])  # tokens before each row's padding
        self.scored = np.maximum(filled - 1, 0)  # its targets that are not padding (a row's first token is none)
        self._epoch, self._perm = -1, None

    def row(self, index: int) -> np.ndarray:
        """Row `index` as token ids, PAD_TARGET where it is padding."""
        out = np.full(self.row_tokens, PAD_TARGET, dtype=np.int64)
        at = 0
        for _, start, length, added in self.table[self.bounds[index]:self.bounds[index + 1]]:
            if added:
                out[at] = self.bos_id
                at += 1
            out[at:at + length] = self.tokens[start:start + length]
            at += length
        return out

    def _permutation(self, epoch: int) -> np.ndarray:
        if epoch != self._epoch:
            self._perm = self.order[np.random.default_rng([self.seed, epoch]).permutation(self.epoch_rows)]
            self._epoch = epoch
        return self._perm

    def _rows(self, start_sample: int, batch_size: int) -> list[int]:
        return [int(self._permutation(s // self.epoch_rows)[s % self.epoch_rows])
                for s in range(start_sample, start_sample + batch_size)]

    def batch(self, start_sample: int, batch_size: int) -> np.ndarray:
        return np.stack([self.row(index) for index in self._rows(start_sample, batch_size)])

    def targets(self, start_sample: int, batch_size: int) -> int:
        """How many targets of `batch(start_sample, batch_size)` are scored (not PAD_TARGET), without building it."""
        return int(sum(int(self.scored[index]) for index in self._rows(start_sample, batch_size)))


def inputs_and_targets(rows, pad_id: int):
    """Inputs (padding as the pad id) and targets (padding as PAD_TARGET) of a (batch, row_tokens) tensor."""
    inputs = rows[:, :-1].clone()
    inputs[inputs == PAD_TARGET] = pad_id
    return inputs, rows[:, 1:]


def read_table(path, chunks: Optional[int] = None) -> np.ndarray:
    table = np.fromfile(path, dtype="<i8").reshape(-1, 4)
    if chunks is not None and len(table) != chunks:
        raise StageError(f"{path}: {len(table)} packing entries, its manifest says {chunks}; rerun the token_cache stage")
    return table
