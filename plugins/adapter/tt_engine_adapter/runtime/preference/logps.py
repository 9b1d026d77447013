"""Completion log-probabilities of preference rows: what every preference loss reads, for the policy (the
preference stage, with gradients) and the reference (the reference stage, without). Runs in the engine
environment."""

from __future__ import annotations

from typing import Any, Sequence

from tt_engine_adapter.runtime.chat import IGNORE_INDEX, Encoded
from tt_engine_adapter.runtime.logits import label_logps


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


def completion_logps(model: Any, rows: Sequence[Encoded], pad_id: int, device: str) -> tuple[Any, Any, Any]:
    """(summed completion log-probs, completion token counts, per-token log-probs with the mask) of each row,
    in one forward pass; gradients flow when the caller's mode allows them."""
    batch = {k: v.to(device) for k, v in collate(rows, pad_id).items()}
    per_token = label_logps(model, model, {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]},
                            batch["labels"])  # logits only at the completion tokens
    mask = batch["labels"][:, 1:] != IGNORE_INDEX
    return per_token.sum(-1), mask.sum(-1), (per_token, mask)
