"""Model inputs for a micro-batch of encoded rows: right-padded, or packed (padding-free).

Padded: one row per sequence, right-padded to the longest row, with an
attention mask. Packed (`hyperparameters.packing`): the micro-batch's rows are
laid end to end in sequences of at most `max_seq_length` tokens, balanced so
that sequences × longest sequence (what the model is fed) is small (`pack`),
those sequences padded to the longest of them.
Position ids restart at 0 at each row and no attention mask is passed:
transformers (5.x `masking_utils.find_packed_sequence_indices`) then builds a
block-diagonal causal mask from the position ids for eager and SDPA attention,
and flash-attention kernels read the same position ids as variable-length
sequences (what TRL's `DataCollatorWithFlattening` relies on). The model must
be called with `use_cache=False`: transformers looks for packed sequences only
when there is no KV cache. The pad tail of
a packed sequence gets positions of its own starting at 0, so it is a block of
its own too. The first label of every row is -100, so no row is trained to
predict another's first token; supervised tokens are the same as unpacked.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any, Sequence

from tt_engine_adapter.runtime.chat import IGNORE_INDEX, Encoded

ATTENTION_LAYERS = {"full_attention", "sliding_attention", "attention", "chunked_attention"}
RECURRENT_MODELS = {"mamba", "mamba2", "falcon_mamba", "rwkv", "recurrent_gemma", "xlstm"}


def packing_refused(config: Any) -> str | None:
    """Why packing cannot isolate rows on this model (None: it can), naming its type and its other layers."""
    kinds = set(getattr(config, "layer_types", None) or []) | set(getattr(config, "layers_block_type", None) or [])
    other = sorted(kinds - ATTENTION_LAYERS)
    model_type = getattr(config, "model_type", type(config).__name__)
    if not other and model_type not in RECURRENT_MODELS:
        return None
    layers = f"{', '.join(other)} layers" if other else "recurrent layers"
    return (f"hyperparameters.packing: {model_type} has {layers}, which carry state from one packed row into the "
            f"next (position ids separate rows in attention only); set packing to false (rows are then padded)")


def pack(lengths: Sequence[int], capacity: int, tries: int = 8) -> list[list[int]]:
    """Row indexes grouped into sequences of at most `capacity` tokens (a longer row alone), as few padded
    tokens as the search finds: for k from the fewest sequences that can hold the rows upwards (`tries`
    values), rows longest first each go to the least-filled sequence; the k whose sequences × longest
    sequence is smallest wins (fewer sequences on a tie)."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    fewest = max(1, -(-sum(lengths) // max(capacity, 1)))
    best: tuple[int, list[list[int]]] | None = None
    for k in range(fewest, min(len(lengths), fewest + tries - 1) + 1):
        heap = [(0, b) for b in range(k)]
        bins: list[list[int]] = [[] for _ in range(k)]
        for index in order:
            load, b = heapq.heappop(heap)
            bins[b].append(index)
            heapq.heappush(heap, (load + lengths[index], b))
        longest = max(load for load, _ in heap)
        if longest > capacity and any(len(b) > 1 and sum(lengths[i] for i in b) > capacity for b in bins):
            continue
        cost = k * longest
        if best is None or cost < best[0]:
            best = (cost, bins)
    if best is None:  # nothing balanced fits: one row per sequence
        return [[i] for i in order]
    return [sorted(b) for b in best[1] if b]


def layout(rows: Sequence[Encoded], packing: bool, capacity: int) -> list[list[int]]:
    """Which rows form each sequence of the micro-batch."""
    if not packing:
        return [[i] for i in range(len(rows))]
    return pack([len(r.input_ids) for r in rows], capacity)


def padded_tokens(rows: Sequence[Encoded], packing: bool, capacity: int) -> int:
    """Tokens the model is fed for this micro-batch, pad included (sequences × longest sequence)."""
    seqs = layout(rows, packing, capacity)
    return len(seqs) * max(sum(len(rows[i].input_ids) for i in seq) for seq in seqs)


@dataclass
class Batch:
    """Keyword arguments for the model plus, per token, the index of the row it belongs to (-1: pad)."""

    inputs: dict[str, Any]
    row_of_token: Any

    def to(self, device: str) -> "Batch":
        return Batch({k: v.to(device) for k, v in self.inputs.items()}, self.row_of_token.to(device))


def collate(rows: Sequence[Encoded], pad_id: int, packing: bool = False, capacity: int = 0) -> Batch:
    """`input_ids`, `labels` and either `attention_mask` (padded) or `position_ids` (packed)."""
    import torch

    seqs = layout(rows, packing, capacity)
    width = max(sum(len(rows[i].input_ids) for i in seq) for seq in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    labels = torch.full((len(seqs), width), IGNORE_INDEX, dtype=torch.long)
    owner = torch.full((len(seqs), width), -1, dtype=torch.long)
    positions = torch.zeros((len(seqs), width), dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for s, seq in enumerate(seqs):
        at = 0
        for index in seq:
            row = rows[index]
            n = len(row.input_ids)
            ids[s, at:at + n] = torch.tensor(row.input_ids)
            labels[s, at:at + n] = torch.tensor(row.labels)
            labels[s, at] = IGNORE_INDEX  # never predicted from the previous row's last token
            owner[s, at:at + n] = index
            positions[s, at:at + n] = torch.arange(n)
            mask[s, at:at + n] = 1
            at += n
        positions[s, at:] = torch.arange(width - at)  # the pad tail: a block of its own
    inputs = {"input_ids": ids, "labels": labels}
    if packing:
        inputs["position_ids"] = positions
    else:
        inputs["attention_mask"] = mask
    return Batch(inputs, owner)
