"""The shared prefix computed once: the rows of an SFT micro-batch all start with the same compiled system
prompt (and chat template), so that prefix runs once and the rest of every row runs against its cached keys and
values, with the gradient flowing back into the prefix once. Runs in the engine environment.

Contract.
- `Sharing.decide(model, packing, gradient_checkpointing, distributed)` once per stage: on, or off with the
  reason (`Sharing.reason`) the stage logs once; off is today's path, every row its whole sequence. Off when:
  packing (rows laid end to end have no common start), under torchrun (DistributedDataParallel takes one forward
  per backward), a model with sliding-window or non-attention layers (its cache cannot be shared this way), a
  model whose forward takes no cache, or gradient checkpointing (the recomputed layers would grow the cache a
  second time) with an attention implementation that takes no prefix tree's mask; under gradient checkpointing
  otherwise, the prefix tree alone (`layout` "no_cache").
- `shared(inputs)`: how many leading positions every row of a right-padded micro-batch shares (same tokens, no
  padding, no label on them nor on the token after: the prefix's own logits are never read), 0 when fewer
  than `MIN_PREFIX` or a single row.
- `Sharing.loss_sum(model, net, inputs)`: the summed next-token loss of the micro-batch, as
  `logits.token_loss_sum` computes it, through the shared prefix when there is one (logits only where the
  loss reads them either way); `Sharing.label_logps` the same for the preference rows' log-probs, and
  `Sharing.answer_logps` for GRPO, where each group's prompt is the prefix of its answers.

Two layouts: the prefix tree (runtime/tree.py: every distinct token once, one forward, no padding) where it costs
less, else the cached prefix (below). Equal to the unshared path within 1e-5 (loss and LoRA gradients, the real
base, LoRA on every linear layer with rsLoRA): tests/test_logits_only.py, tests/test_prefix_tree.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from tt_engine_adapter.decode.prefix import cache_keyword, usable
from tt_engine_adapter.runtime import tree
from tt_engine_adapter.runtime.logits import (IGNORE_INDEX, label_logps, logps_at, loss_sum_at, predicting,
                                             token_loss_sum)

MIN_PREFIX = 4  # shorter shared starts are not worth a second forward
READ_LIMIT = 1 << 26  # logits read by one forward without gradient: 256 MB in float32


def shared(inputs: dict) -> int:
    """Leading positions shared by every row of `inputs` (right-padded, `attention_mask` given), or 0."""
    ids, labels, mask = inputs["input_ids"], inputs["labels"], inputs.get("attention_mask")
    if ids.shape[0] < 2 or mask is None:
        return 0
    common = (ids == ids[:1]).all(0) & (mask == 1).all(0) & (labels == IGNORE_INDEX).all(0)
    run = int(common.int().cumprod(0).sum())  # leading positions that are common and unlabelled
    length = run - 1  # the last of them starts the rest: its logits predict the first label
    return length if length >= MIN_PREFIX else 0


@dataclass(frozen=True)
class Sharing:
    """Whether this stage shares the micro-batch prefix, and the model's cache keyword."""

    on: bool
    reason: str
    cache_kwarg: str = "cache"
    # "auto": the prefix tree where it costs less than the cached prefix (runtime/tree.py), else that;
    # "no_cache": the tree where it costs less than every row whole, else every row whole (under gradient
    # checkpointing, whose recomputed layers would grow a cache twice); "tree": the tree where it fits; "cache"
    layout: str = "auto"

    @staticmethod
    def decide(model: Any, packing: bool, gradient_checkpointing: bool, distributed: bool) -> "Sharing":
        tree_only = gradient_checkpointing and tree.attention_kind(model) is not None
        off: Optional[str] = (
            "hyperparameters.packing is on (packed rows share no start)" if packing else
            "hyperparameters.gradient_checkpointing is on (recomputed layers would grow the cached prefix twice) "
            f"and {tree.implementation(model)} attention takes no prefix tree's mask"
            if gradient_checkpointing and not tree_only else
            "training runs under torchrun (one forward per backward)" if distributed else usable(model))
        if off:
            return Sharing(False, f"shared prefix off: {off}; every row runs its whole sequence")
        if tree_only:
            return Sharing(True, "shared prefix on: each micro-batch runs as one prefix tree (every distinct token "
                                 "once, no padding) where that costs less than every row whole; no cached prefix "
                                 "under hyperparameters.gradient_checkpointing", cache_keyword(model), "no_cache")
        how = ("each micro-batch runs as one prefix tree (every distinct token once, no padding) where that costs "
               "less than its common start run once" if tree.attention_kind(model) else
               f"the rows' common start (system prompt) runs once per micro-batch (no prefix tree: "
               f"{tree.implementation(model)} attention takes no custom mask)")
        return Sharing(True, f"shared prefix on: {how}", cache_keyword(model))

    def as_tree(self, model: Any, inputs: dict, where: Any, length: int) -> Optional[tree.Plan]:
        """The micro-batch's prefix tree (logits read at `where`) when this stage uses one for it (`layout`, the
        cost, `tree.MAX_NODES`)."""
        mask = inputs.get("attention_mask")
        if not self.on or self.layout == "cache" or mask is None or tree.attention_kind(model) is None:
            return None
        planned = tree.plan(inputs["input_ids"], mask == 1, where)
        if planned is None or self.layout == "tree":
            return planned
        rows, width = inputs["input_ids"].shape
        hidden = int(getattr(model.config, "hidden_size", 0) or 1024)
        against = length if self.cached else 0
        return planned if planned.cheaper(hidden, rows, width, against) else None

    @property
    def cached(self) -> bool:
        """Whether the cached-prefix layout may run (where the tree does not)."""
        return self.on and self.layout in ("auto", "cache")

    def loss_sum(self, model: Any, net: Any, inputs: dict) -> Any:
        length = shared(inputs) if self.on else 0
        where = predicting(inputs["labels"])
        planned = self.as_tree(model, inputs, where, length)
        if planned is not None:
            return loss_sum_at(planned.logits_at(model, net, where), inputs["labels"])
        if not length or not self.cached:
            return token_loss_sum(model, net, inputs)
        return token_loss_sum(model, model, self.suffix(model, inputs, length))

    def label_logps(self, model: Any, inputs: dict, labels: Any) -> Any:
        """`logits.label_logps` (`[rows, width - 1]`, 0 where unlabelled) through the shared prefix when there is
        one: the preference rows' completion log-probs (reference and preference stages)."""
        import torch

        length = shared({**inputs, "labels": labels}) if self.on else 0
        where = predicting(labels)
        planned = self.as_tree(model, inputs, where, length)
        if planned is not None:
            return logps_at(planned.logits_at(model, model, where), labels)
        if not length or not self.cached:
            return label_logps(model, model, inputs, labels)
        rest = self.suffix(model, {**inputs, "labels": labels}, length)
        tail = label_logps(model, model, {k: v for k, v in rest.items() if k != "labels"}, rest["labels"])
        return torch.cat([tail.new_zeros(tail.shape[0], length), tail], dim=1)

    def suffix(self, model: Any, inputs: dict, length: int) -> dict:
        """The rows after their shared `length` positions, with the prefix's keys and values (one forward, the
        cache repeated per row: differentiable, so the gradient reaches the prefix's LoRA weights once)."""
        import torch
        from transformers import DynamicCache

        ids = inputs["input_ids"]
        rows, width = ids.shape
        cache = DynamicCache()
        model(input_ids=ids[:1, :length], use_cache=True, logits_to_keep=1, **{self.cache_kwarg: cache})
        cache.batch_repeat_interleave(rows)
        positions = torch.arange(length, width, device=ids.device).unsqueeze(0).expand(rows, -1)
        return {"input_ids": ids[:, length:], "attention_mask": inputs["attention_mask"], "position_ids": positions,
                "labels": inputs["labels"][:, length:], "use_cache": True, self.cache_kwarg: cache}

    def answer_logps(self, model: Any, full: dict, part: Any, group_size: int, temperature: float) -> Any:
        """GRPO: `grpo.token_logps` of rows `part` (a slice or a list of row indices) of `full`
        (reinforcement.train.batch_tensors: prompts left-padded, answers right-padded): the rows as one prefix tree
        where `as_tree` takes them, else each group's prompt (all but its last token) run once."""
        import torch
        from transformers import DynamicCache

        from tt_engine_adapter.runtime.reinforcement.grpo import answer_labels, token_logps

        rows = list(range(part.start, part.stop)) if isinstance(part, slice) else list(part)
        pick = torch.tensor(rows, dtype=torch.long, device=full["input_ids"].device)
        ids, attn, positions, mask = (full[k][pick] for k in ("input_ids", "attention_mask", "position_ids", "mask"))
        n = full["n"]
        length = ids.shape[1] - n - 1
        labels = answer_labels(ids, n, mask)
        where = predicting(labels)
        planned = self.as_tree(model, {"input_ids": ids, "attention_mask": attn}, where, length)
        if planned is not None:
            return logps_at(planned.logits_at(model, model, where), labels, temperature)[:, -n:]
        groups = [i // group_size for i in rows]
        firsts = sorted(set(groups))
        if not self.cached or length < MIN_PREFIX or len(firsts) == len(groups):
            return token_logps(model, ids, attn, n, temperature, positions, mask)
        heads = torch.tensor([groups.index(g) for g in firsts], device=ids.device)
        cache = DynamicCache()
        model(input_ids=ids[heads, :length], attention_mask=attn[heads, :length],
              position_ids=positions[heads, :length], use_cache=True, logits_to_keep=1, **{self.cache_kwarg: cache})
        cache.batch_select_indices(torch.tensor([firsts.index(g) for g in groups], device=ids.device))
        rest = {"input_ids": ids[:, length:], "attention_mask": attn, "position_ids": positions[:, length:],
                "use_cache": True, self.cache_kwarg: cache}
        return label_logps(model, model, rest, answer_labels(ids[:, length:], n, mask), temperature)[:, -n:]

    def answer_micro_batches(self, model: Any, full: dict, rows: list, size: int) -> list:
        """GRPO's micro-batches of `rows`: `size` rows each, or where the prefix tree runs, as many rows as make a
        tree no bigger than the `size` padded rows would be (`size` × the step's width, so the memory the
        setting allows): the groups' prompts then run once for more answers, in fewer forwards."""
        if not self.on or self.layout == "cache" or tree.attention_kind(model) is None or not rows:
            return [rows[s:s + size] for s in range(0, len(rows), size)]
        import torch

        from tt_engine_adapter.runtime.reinforcement.grpo import answer_labels

        budget = size * int(full["input_ids"].shape[1])
        out, start = [], 0
        while start < len(rows):
            pick = torch.tensor(rows[start:], dtype=torch.long, device=full["input_ids"].device)
            ids = full["input_ids"][pick]
            read = predicting(answer_labels(ids, full["n"], full["mask"][pick]))
            counts = tree.node_counts(ids, full["attention_mask"][pick] == 1, read)
            fits = max(1, sum(1 for c in counts if c <= min(budget, tree.MAX_NODES)))
            out.append(rows[start:start + fits])
            start += fits
        return out

    def answer_logps_fixed(self, model: Any, full: dict, chunks: list, group_size: int, temperature: float) -> list:
        """No gradient (the old and the reference log-probs): `answer_logps` of each of `chunks`, computed in one
        forward over all their rows when the logits read stay under `READ_LIMIT` (a forward without gradient
        keeps no activations, so its memory is the logits'), else chunk by chunk."""
        import torch

        rows = [i for part in chunks for i in (range(part.start, part.stop) if isinstance(part, slice) else part)]
        vocab = int(getattr(model.get_output_embeddings(), "out_features", 0) or 0) or 1 << 17
        with torch.no_grad():
            if len(chunks) < 2 or len(rows) * full["n"] * vocab > READ_LIMIT:
                return [self.answer_logps(model, full, part, group_size, temperature) for part in chunks]
            whole = self.answer_logps(model, full, rows, group_size, temperature)
        out, start = [], 0
        for part in chunks:
            size = len(range(part.start, part.stop)) if isinstance(part, slice) else len(part)
            out.append(whole[start:start + size])
            start += size
        return out
