"""Completion log-probabilities of preference rows: what every preference loss reads, for the policy (the
preference stage, with gradients) and the reference (the reference stage, without). Runs in the engine
environment."""

from __future__ import annotations

from typing import Any, Optional, Sequence

from tt_engine_adapter.runtime.chat import IGNORE_INDEX, Encoded
from tt_engine_adapter.runtime.logits import label_logps
from tt_engine_adapter.runtime.prefix import Sharing


def collate(rows: Sequence[Encoded], pad_id: int) -> dict[str, Any]:
    """Right-padded `input_ids`, `attention_mask` and `labels` (-100 outside the completions)."""
    import torch

    width = max(len(r.input_ids) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    labels = torch.full((len(rows), width), IGNORE_INDEX, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        n = len(row.input_ids)
        ids[i, :n] = torch.tensor(row.input_ids)
        labels[i, :n] = torch.tensor(row.labels)
        mask[i, :n] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def completion_logps(model: Any, rows: Sequence[Encoded], pad_id: int, device: str,
                     sharing: Optional[Sharing] = None) -> tuple[Any, Any, Any]:
    """(summed completion log-probs, completion token counts, per-token log-probs with the mask) of each row,
    in one forward pass (with `sharing` on: the rows' common start once, then the rest); gradients flow when
    the caller's mode allows them."""
    batch = {k: v.to(device) for k, v in collate(rows, pad_id).items()}
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    per_token = (sharing.label_logps(model, inputs, batch["labels"]) if sharing is not None else
                 label_logps(model, model, inputs, batch["labels"]))  # logits only at the completion tokens
    mask = batch["labels"][:, 1:] != IGNORE_INDEX
    return per_token.sum(-1), mask.sum(-1), (per_token, mask)
