"""Logits only where the loss reads them. Runs in the engine environment.

A causal LM's head turns every position's hidden state into a row of vocabulary logits (49,152 columns on
SmolLM2), but a loss reads only the positions that predict a labelled token: the answer tokens of SFT, the
completions of preference rows, a GRPO answer. `only(model, where)` gathers the hidden states at `where`
(a bool `[rows, width]` mask, True at a position whose next token is read) before the head, through a forward
pre-hook on the model's output embedding, so the head, the fp32 upcast, the log-softmax and their backward run
on those positions alone; `picked(logits, where)` is then `[positions, vocab]` in row-major order (the order of
`tensor[where]`). A model whose head is not the module `get_output_embeddings()` returns, or that reshapes its
hidden states before it, still gets the right numbers: `picked` gathers from full logits when the head ran on
every position (today's path, only slower).

- `predicting(labels)`: the positions whose logits the next-token loss reads (the shift: position t predicts
  label t + 1);
- `token_loss_sum(model, net, inputs)`: the summed next-token cross-entropy of a batch (`labels` -100 where
  unsupervised), what transformers' causal-LM loss sums before dividing by `num_items_in_batch`;
- `label_logps(model, net, inputs, labels, temperature)`: per-position log-probabilities `[rows, width - 1]` of
  the next label (0 where the label is -100), what the preference and GRPO losses read;
- `loss_sum_at(logits, labels)`, `logps_at(logits, labels, temperature)`: the same from logits already read at
  `predicting(labels)` in row-major order (runtime/tree.py reads them from its one forward).

`net` is what is called (the model itself, or its DistributedDataParallel wrapper); `model` owns the head;
`inputs` are the model's keyword arguments (`use_cache` False unless they say otherwise).
The equality with the full-logits path (loss and gradients within 1e-5 on the real base) is
tests/test_logits_only.py.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

IGNORE_INDEX = -100


def predicting(labels: Any) -> Any:
    """Bool `[rows, width]`: True at position t when label t + 1 is supervised."""
    import torch

    where = torch.zeros_like(labels, dtype=torch.bool)
    where[:, :-1] = labels[:, 1:] != IGNORE_INDEX
    return where


@contextmanager
def only(model: Any, where: Any) -> Iterator[None]:
    """While inside, the head of `model` runs on the hidden states at `where` alone (`[1, positions, hidden]`)."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is None:
        yield
        return

    def gather(_module: Any, args: tuple) -> Any:
        hidden = args[0]
        if hidden.dim() != 3 or tuple(hidden.shape[:2]) != tuple(where.shape):
            return None  # not the layout this mask describes: the head runs as it would
        return (hidden[where].unsqueeze(0),) + tuple(args[1:])

    handle = head.register_forward_pre_hook(gather)
    try:
        yield
    finally:
        handle.remove()


def picked(logits: Any, where: Any) -> Any:
    """`[positions, vocab]` logits at `where`, from the gathered head output or from full logits."""
    n = int(where.sum())
    if logits.dim() == 3 and tuple(logits.shape[:2]) == (1, n):
        return logits[0]
    if tuple(logits.shape[:2]) == tuple(where.shape):
        return logits[where]
    raise RuntimeError(f"logits of shape {tuple(logits.shape)} do not match the positions mask "
                       f"{tuple(where.shape)}: the model's head produced an unexpected layout")


def forward_at(model: Any, net: Any, where: Any, **inputs: Any) -> Any:
    """`[positions, vocab]` logits at `where` from one forward of `net` (no labels passed: no loss inside)."""
    inputs.pop("labels", None)
    inputs.pop("num_items_in_batch", None)
    with only(model, where):
        out = net(**inputs)
    return picked(out.logits, where)


def token_loss_sum(model: Any, net: Any, inputs: dict) -> Any:
    """Summed next-token cross-entropy over the supervised labels of `inputs` (fp32, like transformers')."""
    labels = inputs["labels"]
    return loss_sum_at(forward_at(model, net, predicting(labels), **{"use_cache": False, **inputs}), labels)


def label_logps(model: Any, net: Any, inputs: dict, labels: Any, temperature: float = 1.0) -> Any:
    """Log-probabilities `[rows, width - 1]` of each next label at `temperature`, 0 where it is -100."""
    logits = forward_at(model, net, predicting(labels), **{"use_cache": False, **inputs})
    return logps_at(logits, labels, temperature)


def loss_sum_at(logits: Any, labels: Any) -> Any:
    """The summed cross-entropy of `logits` read at `predicting(labels)` (row-major) against the labels."""
    import torch

    targets = labels[:, 1:][labels[:, 1:] != IGNORE_INDEX]
    return torch.nn.functional.cross_entropy(logits.float(), targets, reduction="sum")


def logps_at(logits: Any, labels: Any, temperature: float = 1.0) -> Any:
    """`[rows, width - 1]` log-probabilities of the next labels from `logits` read at `predicting(labels)`."""
    import torch

    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    targets = labels[:, 1:][labels[:, 1:] != IGNORE_INDEX]
    chosen = logits.log_softmax(-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    out = torch.zeros(labels[:, 1:].shape, dtype=chosen.dtype, device=chosen.device)
    return out.masked_scatter(labels[:, 1:] != IGNORE_INDEX, chosen)
