"""Bits per byte, comparable with nanochat's `evaluate_bpb`.

Sum of target-token cross-entropy (nats) over targets whose raw byte length is
above zero, divided by ln(2) times the total bytes of those targets. Special
tokens count as zero bytes; byte lengths come from each token's raw bytes.
The text is cut into non-overlapping windows of sequence_length + 1 tokens
(each window predicts sequence_length targets); a tail shorter than a window
is evaluated as a shorter window.

`evaluate_bpb_document_starts` is the other protocol (nanochat's, whose rows
all begin at a document's BOS): one row per document, its first
sequence_length + 1 tokens from its BOS, the rest of a long document unscored.
Both count the same way, so the two figures differ only in which targets they score.
"""

from __future__ import annotations

import contextlib
import math
from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F


@torch.no_grad()
def evaluate_bpb(
    model,
    tokens: np.ndarray,
    sequence_length: int,
    batch_size: int,
    token_bytes: torch.Tensor,
    device,
    autocast_dtype: Optional[torch.dtype] = None,
) -> dict:
    starts = list(range(0, max(len(tokens) - 1, 0), sequence_length))
    windows = [(s, min(sequence_length + 1, len(tokens) - s)) for s in starts]
    return _score(model, tokens, windows, batch_size, token_bytes, device, autocast_dtype)


@torch.no_grad()
def evaluate_bpb_document_starts(model, tokens: np.ndarray, bos_id: int, sequence_length: int, batch_size: int,
                                 token_bytes: torch.Tensor, device, autocast_dtype: Optional[torch.dtype] = None) -> dict:
    """Bits per byte over each document's first sequence_length + 1 tokens, from its BOS."""
    starts = np.flatnonzero(np.asarray(tokens) == bos_id).tolist()
    ends = starts[1:] + [len(tokens)]
    windows = [(s, min(sequence_length + 1, e - s)) for s, e in zip(starts, ends)]
    return _score(model, tokens, windows, batch_size, token_bytes, device, autocast_dtype)


def _score(model, tokens, windows, batch_size, token_bytes, device, autocast_dtype) -> dict:
    """Score (start, length) windows: rows of one length batched together, each predicting length - 1 targets."""
    model.eval()
    token_bytes = token_bytes.to(device)
    total_nats = torch.zeros((), dtype=torch.float64, device=device)
    total_bytes = torch.zeros((), dtype=torch.int64, device=device)
    ctx = (
        torch.autocast(device_type="cuda", dtype=autocast_dtype)
        if autocast_dtype is not None and device.type == "cuda"
        else contextlib.nullcontext()
    )
    targets_seen = 0
    by_length: dict[int, list[int]] = {}
    for start, length in windows:
        if length >= 2:
            by_length.setdefault(length, []).append(start)
    groups = [(length, group[i:i + batch_size]) for length, group in sorted(by_length.items(), reverse=True)
              for i in range(0, len(group), batch_size)]
    for length, group in groups:
        rows = np.stack([np.asarray(tokens[s : s + length], dtype=np.int64) for s in group])
        rows_t = torch.from_numpy(rows).to(device)
        with ctx:
            logits = model(rows_t[:, :-1])
        y = rows_t[:, 1:].reshape(-1)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), y, reduction="none")
        nbytes = token_bytes[y]
        total_nats += (loss.double() * (nbytes > 0)).sum()
        total_bytes += nbytes.sum()
        targets_seen += y.numel()
    nats, nbytes = float(total_nats), int(total_bytes)
    if nbytes == 0:
        raise ValueError("no target bytes to evaluate")
    return {"bpb": nats / (math.log(2) * nbytes), "bytes": nbytes, "targets": targets_seen, "nats": nats}
